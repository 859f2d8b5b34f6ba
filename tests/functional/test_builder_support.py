"""Shared set-up for the builder tests (no tests here): builders made from
YAML on the test's ZooKeeper chroot, a netns provider to upload to, a
fake clock, and a gate that holds a build until the test opens it."""

from __future__ import annotations

import itertools
import os
import threading

import pytest

from nodepool.builder.builder import NodepoolBuilder
from nodepool.builder.settings import BuilderSettings
from nodepool.config import load_config_text
from nodepool.driver.netns.host import NetnsHostManager, available
from nodepool.zk.api import NodepoolZooKeeper
from tests.functional.test_nodepool_support import netns_settings, remove_bridge

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
TINY_IMAGE = os.path.join(TOP, 'tests', 'fixtures', 'builder', 'tiny-image.sh')
ROOTFS_IMAGE = os.path.join(TOP, 'tools', 'netns-rootfs-image.sh')

needs_netns = pytest.mark.skipif(available() is not None,
                                 reason=f'netns nodes unavailable: {available()}')

_providers = itertools.count(1)

CONFIG = """
images-dir: {images_dir}
build-log-dir: {log_dir}
build-log-retention: {log_retention}
diskimages:
  - name: tiny
    dib-cmd: {dib_cmd}
    rebuild-age: {rebuild_age}
    release: bookworm
    username: root
    env-vars:
{env}
labels:
  - name: tiny-node
providers:
  - name: {provider}
    driver: netns
    boot-timeout: 60
    authorized-keys:
      - {key}
    subnet: {subnet}
    bridge: {bridge}
    state-dir: {state_dir}
    diskimages:
      - name: tiny
        pause: {upload_pause}
    pools:
      - name: main
        max-servers: 2
        labels:
          - name: tiny-node
            diskimage: tiny
"""


class FakeClock:
    """The builder's clock, moved by the test (build ages, retry delays)."""

    def __init__(self, now: float = 1_750_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def builder_config(provider: dict, tmp_path, name: str = 'a', dib_cmd: str = TINY_IMAGE,
                   rebuild_age: int = 3600, env: dict | None = None, key: str = 'ssh-ed25519 '
                   'AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForBuilderTests0000000000000000000',
                   log_retention: int = 7, upload_pause: bool = False) -> str:
    """nodepool.yaml for one builder (its own images and log dirs)."""
    env = {'IMAGE_MARKER': 'built-for-tests', **(env or {})}
    return CONFIG.format(
        images_dir=tmp_path / f'images-{name}', log_dir=tmp_path / f'logs-{name}',
        dib_cmd=dib_cmd, rebuild_age=rebuild_age, log_retention=log_retention,
        env=''.join(f'      {k}: "{v}"\n' for k, v in env.items()),
        provider=provider['name'], key=key, subnet=provider['subnet'],
        bridge=provider['bridge'], state_dir=provider['state-dir'],
        upload_pause='true' if upload_pause else 'false')


def fast_builder_settings(**overrides) -> BuilderSettings:
    """Passes are asked for explicitly (``run_build_pass`` and friends) or
    started by ZooKeeper changes, so the periodic ones are far apart."""
    values = dict(build_interval=3600, upload_interval=3600, cleanup_interval=3600,
                  build_retry_delay=60, upload_retry_delay=60, upload_workers=2)
    values.update(overrides)
    return BuilderSettings(**values)


class BuilderFactory:
    def __init__(self, zk_chroot):
        self.zk_chroot = zk_chroot
        self.builders: list[NodepoolBuilder] = []

    def make(self, yaml_text: str, settings: BuilderSettings | None = None, clock=None,
             start: bool = True) -> NodepoolBuilder:
        config = load_config_text(yaml_text)
        zk = NodepoolZooKeeper(self.zk_chroot.client())
        builder = NodepoolBuilder(config, zk, settings or fast_builder_settings(),
                                  **({'clock': clock} if clock else {}))
        self.builders.append(builder)
        if start:
            builder.start()
        return builder

    def close(self) -> None:
        for builder in self.builders:
            builder.stop(timeout=30)


@pytest.fixture
def builders(zk_chroot):
    factory = BuilderFactory(zk_chroot)
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def upload_provider(tmp_path):
    """A netns provider of this test's own to upload to (and launch in);
    namespaces left behind are removed afterwards."""
    settings = netns_settings(tmp_path)
    settings['name'] = f'nb{os.getpid()}-{next(_providers)}'
    yield settings
    manager = NetnsHostManager(base_dir=settings['state-dir'], subnet=settings['subnet'],
                               bridge=settings['bridge'])
    manager.cleanup_all(settings['name'] + '-')
    remove_bridge(settings['bridge'])


class Gate:
    """A FIFO the tiny image's build waits on (``BUILD_GATE``)."""

    def __init__(self, path):
        self.path = str(path)
        os.mkfifo(self.path)

    def open(self, timeout: float = 30.0) -> None:
        """Let one waiting build go on (waits until one is waiting)."""
        opened = threading.Thread(target=lambda: open(self.path, 'w').close(), daemon=True)
        opened.start()
        opened.join(timeout)
        if opened.is_alive():
            raise TimeoutError('no build came to the gate')


@pytest.fixture
def gate(tmp_path):
    return Gate(tmp_path / 'gate')


def build_states(builder: NodepoolBuilder, image: str = 'tiny') -> list[tuple[str, str]]:
    return [(b.id, b.state) for b in builder.images.get_builds(image)]


def upload_states(builder: NodepoolBuilder, image: str = 'tiny') -> list[tuple[str, str, str]]:
    return [(u.build_id, u.id, u.state) for u in builder.images.get_uploads(image)]
