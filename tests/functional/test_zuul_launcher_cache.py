"""zuul.launcher.cache: after a fence, a watch-driven cache holds every
change another ZooKeeper session committed before it (so a loop reading
the cache acts on a view as fresh as reading every record)."""

from __future__ import annotations

import threading

from nodepool.zk.records import Node
from tests.functional import test_zuul_launcher_support as support
from tests.functional.test_zuul_launcher_support import (
    canonical,
    provider,
    publish_providers,
)
from zuul.launcher.cache import FencedCache, fence

launchers = support.launchers
requestor = support.requestor

ROOT = '/fence-test'


def _node(state: str, n: int) -> bytes:
    return Node(type=f't{n}', state=state).serialize()


def test_a_fenced_cache_holds_every_change_made_before_the_fence(zk_chroot):
    writer = zk_chroot.client()
    reader = zk_chroot.client()
    writer.ensure_path(ROOT)
    cache = FencedCache(reader, ROOT, Node)
    cache.start()
    try:
        for round_ in range(20):
            # Creates, updates and deletes, committed by another session.
            for i in range(5):
                path = f'{ROOT}/n{round_}-{i}'
                writer.create(path, _node('building', i))
                writer.set(path, _node('ready', i))
            writer.delete(f'{ROOT}/n{round_}-0')
            assert fence(reader, [cache])
            names = set(cache.names())
            assert f'n{round_}-0' not in names
            for i in range(1, 5):
                record = cache.get(f'n{round_}-{i}')
                assert record is not None and record.state == 'ready', (round_, i)
    finally:
        cache.stop()


def test_fence_refuses_a_cache_that_is_not_synced(zk_chroot):
    client = zk_chroot.client()
    cache = FencedCache(client, ROOT, Node)
    assert not fence(client, [cache])         # never started
    assert not fence(client, [None])


def test_passes_read_the_fenced_caches(zk_client, launchers, requestor):
    publish_providers(zk_client, provider('sim-a', ['ubuntu']))
    launcher = launchers()
    handles = [requestor.submit([canonical('ubuntu')] * 2) for _ in range(5)]
    for handle in handles:
        assert handle.wait(20) and handle.fulfilled
        requestor.release(handle)
    assert launcher.assigner.passes > 0
    assert launcher.assigner.cached_passes == launcher.assigner.passes


def test_concurrent_writers_and_fences_agree(zk_chroot):
    """Fences taken while another session keeps writing always see at
    least everything written before them."""
    writer = zk_chroot.client()
    reader = zk_chroot.client()
    writer.ensure_path(ROOT)
    cache = FencedCache(reader, ROOT, Node)
    cache.start()
    written = []
    stop = threading.Event()

    def write():
        i = 0
        while not stop.is_set() and i < 400:
            writer.create(f'{ROOT}/w{i}', _node('ready', i))
            written.append(f'w{i}')
            i += 1
    thread = threading.Thread(target=write)
    thread.start()
    try:
        for _ in range(30):
            before = list(written)
            assert fence(reader, [cache])
            assert set(before) <= set(cache.names())
    finally:
        stop.set()
        thread.join()
        cache.stop()
