"""Kept for imports: the SQL drivers live in the package itself."""

from zuul.driver.sql import MySQLDriver, PostgreSQLDriver, SQLDriver


def SQLSchemaDriver(name='sql'):  # noqa: N802 - a factory named like the class
    return {'sql': SQLDriver, 'mysql': MySQLDriver, 'postgresql': PostgreSQLDriver}[name]()


__all__ = ['SQLSchemaDriver']
