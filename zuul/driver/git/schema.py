"""Kept for imports: the git driver lives in the package itself."""

from zuul.driver.git import GitDriver as GitSchemaDriver

__all__ = ['GitSchemaDriver']
