"""Kept for imports: the smtp driver lives in the package itself."""

from zuul.driver.smtp import SMTPDriver as SMTPSchemaDriver

__all__ = ['SMTPSchemaDriver']
