"""zuul-web's status from ZooKeeper on a running system (issue 29): the
scheduler publishes each tenant's status there, and a zuul-web whose
scheduler calls all fail still serves the status page's data."""

from __future__ import annotations

import json
import urllib.request

from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for
from zuul.web.server import ZuulWeb
from zuul.zk.status import StatusStore


class _NoScheduler:
    """An RPC client whose every call fails, as with no scheduler up."""

    def __init__(self):
        self.calls = []

    def call(self, function, request):
        self.calls.append(function)
        raise TimeoutError('no scheduler answered')


def _items(status: dict) -> list[str]:
    return [item['id'] for pipeline in status['pipelines']
            for queue in pipeline['change_queues'] for head in queue['heads']
            for item in head]


def test_status_is_served_from_zookeeper(zuul_system, zk_chroot):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    store = StatusStore(zk_chroot.client())
    wait_for(lambda: store.read('example') is not None, timeout=30,
             what='the status published')
    # The item appears in the published status while it is queued, and is
    # gone once reported, without anyone asking the scheduler.
    system.executor.pause()
    change = system.store.create_change('org/app', 'master', 'Publish', {'a.py': '1\n'})
    wait_for(lambda: f'{change.number},1' in _items(store.read('example')), timeout=60,
             what='the item in the published status')
    rpc = _NoScheduler()
    web = ZuulWeb('127.0.0.1', 0, rpc, published_status=store)
    web.start()
    try:
        url = f'http://127.0.0.1:{web.port}/api/tenant/example/status'
        with urllib.request.urlopen(url, timeout=30) as response:
            served = json.load(response)
        assert f'{change.number},1' in _items(served)
        assert rpc.calls == []
        system.executor.resume()
        wait_for(lambda: system.verified(change), timeout=120, what='the report')
        wait_for(lambda: f'{change.number},1' not in _items(store.read('example')),
                 timeout=60, what='the item gone from the published status')
    finally:
        web.stop()
