"""Every driver this system ships (registered explicitly)."""

from __future__ import annotations

from zuul.driver.base import Driver

#: Connection drivers that name a node provider for zuul-launcher (seed
#: 001: "Information about connecting to a cloud will be added to
#: zuul.conf as a connection entry"); the provider drivers themselves
#: are nodepool.driver's.
PROVIDER_DRIVERS = ('openstack', 'static', 'netns', 'simulated', 'aws', 'kubernetes',
                    'metastatic', 'gce', 'azure')


class ProviderConnectionDriver(Driver):
    """A ``[connection NAME]`` section whose ``driver`` is one of
    ``PROVIDER_DRIVERS``: cloud credentials and knobs (``cloud``, ``region``,
    ``rate``, ``state-dir`` ...) that zuul-launcher passes to the
    provider driver.  It has no source, trigger or reporter, so the
    scheduler and web just carry it; zuul-launcher reads its options."""

    def __init__(self, name: str):
        self.name = name

    def connection_schema(self):
        import voluptuous as vs
        return vs.Schema({str: str}, extra=vs.ALLOW_EXTRA)


def all_drivers() -> list:
    from zuul.driver.gerrit import GerritDriver
    from zuul.driver.git import GitDriver
    from zuul.driver.github import GithubDriver
    from zuul.driver.gitlab import GitlabDriver
    from zuul.driver.smtp import SMTPDriver
    from zuul.driver.sql import MySQLDriver, PostgreSQLDriver, SQLDriver
    from zuul.driver.timer import TimerDriver
    from zuul.driver.zuul import ZuulDriver
    return [GerritDriver(), GitDriver(), GithubDriver(), GitlabDriver(), TimerDriver(),
            ZuulDriver(), SQLDriver(), MySQLDriver(), PostgreSQLDriver(), SMTPDriver(),
            *(ProviderConnectionDriver(name) for name in PROVIDER_DRIVERS)]
