"""Every driver this system ships (registered explicitly)."""

from __future__ import annotations


def all_drivers() -> list:
    from zuul.driver.gerrit import GerritDriver
    from zuul.driver.git import GitDriver
    from zuul.driver.smtp import SMTPDriver
    from zuul.driver.sql import MySQLDriver, PostgreSQLDriver, SQLDriver
    from zuul.driver.timer import TimerDriver
    from zuul.driver.zuul import ZuulDriver
    return [GerritDriver(), GitDriver(), TimerDriver(), ZuulDriver(), SQLDriver(),
            MySQLDriver(), PostgreSQLDriver(), SMTPDriver()]
