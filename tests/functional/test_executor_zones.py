"""Executor zones over a real Gearman server and ZooKeeper: a build on
nodes of a zone runs only on an executor of that zone, and waits, queued
and visible as such, while none is up; an unzoned build never goes to a
zoned executor unless it allows unzoned builds."""

from __future__ import annotations

import dataclasses

from tests.functional.test_executor_support import (  # noqa: F401 - fixtures
    exec_env,
    exec_keypair,
    exec_nodes,
    execute_request,
    item,
    node_spec,
    playbook,
)
from tests.harness.daemons import gear_jobs
from tests.harness.waiting import wait_for
from zuul.executor.client import ExecutorClient
from zuul.executor.protocol import JobSpec
from zuul.executor.server import ExecutorServer
from zuul.zk.builds import BuildRecords

OK = ('- hosts: all\n  gather_facts: false\n  tasks:\n'
      '    - command: "true"\n')


def _executor(env, gearman_server, name: str, zk=None, **settings):
    settings = dataclasses.replace(env.settings, hostname=f'{name}.example.org',
                                   job_dir=f'{env.root}/{name}', state_dir=f'{env.root}/s{name}',
                                   **settings)
    records = BuildRecords(zk) if zk is not None else None
    server = ExecutorServer(settings, '127.0.0.1', gearman_server.port, env.merger,
                            build_records=records)
    server.start()
    return server


def _request(env, uuid):
    node = env.factory.make()
    job = JobSpec(name='j', run=[playbook('org/project', 'playbooks/ok.yaml')])
    return execute_request(uuid, job, [node_spec(node, 'controller')], [item('org/project')])


def test_zoned_builds_run_only_in_their_zone(exec_env, gearman_server, zk_chroot):  # noqa: F811
    exec_env.upstream.create('org/project', {'playbooks/ok.yaml': OK})
    zk = zk_chroot.client()
    records = BuildRecords(zk)
    plain = _executor(exec_env, gearman_server, 'plain', zk)
    client = ExecutorClient('127.0.0.1', gearman_server.port)
    servers = [plain]
    try:
        assert records.executor_zones() == {None}
        # No executor of zone vpn: the build waits in the queue, untaken.
        waiting = client.execute(_request(exec_env, '1' * 32), zone='vpn')
        wait_for(lambda: gear_jobs(gearman_server.port).get('executor:execute:vpn',
                                                            (0, 0))[0] == 1,
                 timeout=30, what='the zoned build queued')
        unzoned = client.execute(_request(exec_env, '2' * 32))
        assert unzoned.wait(180).result == 'SUCCESS'
        assert unzoned.worker_hostname == 'plain.example.org'
        assert not waiting.done and waiting.worker_hostname is None
        # An executor of the zone comes up: it takes the waiting build.
        vpn = _executor(exec_env, gearman_server, 'vpn', zk, zone='vpn')
        servers.append(vpn)
        assert waiting.wait(180).result == 'SUCCESS'
        assert waiting.worker_hostname == 'vpn.example.org'
        assert records.executor_zones() == {None, 'vpn'}
        # The zoned executor takes no unzoned build (the plain one does),
        # nor one of another zone.
        plain.pause()
        other = client.execute(_request(exec_env, '3' * 32))
        elsewhere = client.execute(_request(exec_env, '4' * 32), zone='eu')
        wait_for(lambda: gear_jobs(gearman_server.port).get('executor:execute', (0, 0))[0] == 1,
                 timeout=30, what='the unzoned build queued')
        assert not other.done and not elsewhere.done
        # allow_unzoned: a zoned executor that also takes unzoned builds.
        both = _executor(exec_env, gearman_server, 'both', zk, zone='vpn', allow_unzoned=True)
        servers.append(both)
        assert other.wait(180).result == 'SUCCESS'
        assert other.worker_hostname == 'both.example.org'
        assert not elsewhere.done
        client.cancel(elsewhere)
    finally:
        client.stop()
        for server in servers:
            server.stop()
        zk.stop()
