"""Kept for imports: the zuul driver lives in the package itself."""

from zuul.driver.zuul import ZuulDriver as ZuulSchemaDriver

__all__ = ['ZuulSchemaDriver']
