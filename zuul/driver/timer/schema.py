"""Kept for imports: the timer driver lives in the package itself."""

from zuul.driver.timer import TimerDriver as TimerSchemaDriver

__all__ = ['TimerSchemaDriver']
