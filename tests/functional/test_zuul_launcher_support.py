"""Shared set-up for the zuul-launcher tests: resolved providers as the
scheduler would publish them, launchers over a test's ZooKeeper chroot,
and a requestor doing what Zuul's scheduler does."""

from __future__ import annotations

import pytest

from nodepool.driver import DriverRegistry, LaunchError
from nodepool.driver.simulated.adapter import SimulatedAdapter
from nodepool.driver.simulated.driver import SimulatedDriver
from nodepool.driver.static.driver import StaticDriver
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.paths import ZUUL_LAUNCHER
from nodepool.zk.requestor import NodeRequestClient
from zuul.configloader.zuulconf import LauncherSettingsConf
from zuul.launcher.server import ZuulLauncher
from zuul.model.launcher import ResolvedLabel, ResolvedProvider
from zuul.zk.launcher_config import publish

PROJECT = 'review.example.org/org/config'


def canonical(name: str) -> str:
    return f'{PROJECT}/{name}'


def provider(name: str, labels, connection: str | None = 'sim', settings: dict | None = None,
             label_settings: dict | None = None, min_ready: dict | None = None,
             max_ready_age: dict | None = None) -> ResolvedProvider:
    resolved = ResolvedProvider(canonical_name=canonical(name), name=name,
                                section=canonical(f'{name}-section'), connection=connection,
                                settings=dict(settings or {}), tenants=['tenant-one'])
    for label in labels:
        resolved.labels[canonical(label)] = ResolvedLabel(
            canonical_name=canonical(label), name=label, image=None, flavor=None,
            min_ready=(min_ready or {}).get(label, 0),
            max_ready_age=(max_ready_age or {}).get(label, 0),
            settings=dict((label_settings or {}).get(label, {})))
    return resolved


def publish_providers(client, *providers: ResolvedProvider) -> None:
    publish(client, {p.canonical_name: p for p in providers})


class FailingAdapter(SimulatedAdapter):
    """Fails every launch of the providers named in ``FAILING``."""

    def create(self, spec):
        self.specs = getattr(self, 'specs', [])
        self.specs.append(spec)
        if self.provider.name in FailingDriver.failing:
            FailingDriver.attempts.append(self.provider.name)
            raise LaunchError(f'{self.provider.name} always fails (test)')
        return super().create(spec)


class FailingDriver(SimulatedDriver):
    failing: set = set()
    attempts: list = []

    def get_adapter(self, provider):
        return FailingAdapter(provider)


def failing_registry(*names: str) -> DriverRegistry:
    FailingDriver.failing = set(names)
    FailingDriver.attempts = []
    return DriverRegistry([FailingDriver(), StaticDriver()])


def settings(**kw) -> LauncherSettingsConf:
    kw.setdefault('poll_interval', 0.05)
    kw.setdefault('cleanup_interval', 0.5)
    kw.setdefault('leak_grace', 0.5)
    return LauncherSettingsConf(**kw)


@pytest.fixture
def launchers(zk_chroot):
    """make(conns, registry=None, **settings) -> a started ZuulLauncher."""
    made = []

    def make(conns=None, registry=None, **kw):
        client = zk_chroot.client()
        launcher = ZuulLauncher(client, conns if conns is not None else
                                {'sim': {'driver': 'simulated', 'options': {}}},
                                settings(**kw), registry=registry)
        launcher.start()
        made.append(launcher)
        return launcher
    yield make
    for launcher in made:
        launcher.stop()


@pytest.fixture
def requestor(zk_chroot):
    client = NodeRequestClient(NodepoolZooKeeper(zk_chroot.client(), tree=ZUUL_LAUNCHER),
                               requestor='zuul-test')
    client.start()
    yield client
    client.stop()


def zuul_zk(zk_client) -> NodepoolZooKeeper:
    return NodepoolZooKeeper(zk_client, tree=ZUUL_LAUNCHER)
