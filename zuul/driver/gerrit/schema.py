"""Kept for imports: the gerrit driver lives in the package itself."""

from zuul.driver.gerrit import GerritDriver as GerritSchemaDriver

__all__ = ['GerritSchemaDriver']
