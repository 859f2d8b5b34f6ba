"""disable-after-consecutive-failures end to end: the development Gerrit,
the merger, the executor running real playbooks and the scheduler daemon.
After two failures in a row check is disabled: a passing change gets no
vote, only the ``disabled`` reporter's comment; a full reconfiguration
enables the pipeline again."""

from __future__ import annotations

from tests.functional.system_support import PIPELINES, zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for

DISABLING_PIPELINES = PIPELINES.replace("""
    name: check
    manager: independent
""", """
    name: check
    manager: independent
    disable-after-consecutive-failures: 2
    disabled:
      gerrit: {}
""", 1)


def test_check_disabled_after_two_failures_until_reconfigured(zuul_system):  # noqa: F811
    from zuul.lib import rpc_protocol as p
    from zuul.lib.rpc import RPCClient
    assert DISABLING_PIPELINES != PIPELINES
    system = zuul_system
    system.create_projects(pipelines=DISABLING_PIPELINES)
    system.start()
    store = system.store
    for n in (1, 2):
        bad = store.create_change('org/app', 'master', f'Bad {n}', {'FAIL': f'{n}\n'})
        wait_for(lambda: system.verified(bad) == -1, timeout=240, what=f'failure {n}')
    check = system.scheduler.tenants['example'].managers['check']
    # The vote is visible in Gerrit a moment before the scheduler thread
    # counts the failure: wait for the count, not just the vote.
    wait_for(lambda: check.disabled, timeout=30, what='check disabled')
    good = store.create_change('org/app', 'master', 'Good', {'ok.txt': '1\n'})
    wait_for(lambda: any('Build succeeded' in m for m in system.messages(good)),
             timeout=240, what='the disabled report')
    system.settle()
    assert not system.verified(good)   # the success reporter (Verified +1) was skipped
    assert (good.number, 'check-marker') in [(e['change'], e['job'])
                                             for e in system.launches]
    client = RPCClient('127.0.0.1', system.conf.gearman.port, timeout=120)
    try:
        assert client.call(p.RECONFIGURE, p.RPCRequest()) == {'reconfigured': ['example']}
    finally:
        client.shutdown()
    assert not system.scheduler.tenants['example'].managers['check'].disabled
    again = store.create_change('org/app', 'master', 'Good again', {'ok2.txt': '1\n'})
    wait_for(lambda: system.verified(again) == 1, timeout=240, what='vote after re-enabling')
