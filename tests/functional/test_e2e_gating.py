"""Project gating end to end: the development Gerrit over SSH, ZooKeeper,
Gearman, zuul-merger, zuul-executor running real ansible-playbook, and the
scheduler daemon's service. Changes are proposed and approved in Gerrit;
what Zuul reports and merges is read back from Gerrit."""

from __future__ import annotations

import pathlib
import textwrap

import pytest

from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.functional.test_e2e_multinode import launcher  # noqa: F401 - fixture
from tests.harness.waiting import wait_for


def test_check_reports_success_and_failure(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    good = system.store.create_change('org/app', 'master', 'Good change', {'app.py': 'ok\n'})
    bad = system.store.create_change('org/app', 'master', 'Bad change', {'FAIL': 'yes\n'})
    wait_for(lambda: system.verified(good) == 1 and system.verified(bad) == -1,
             timeout=240, what='check votes')
    (ok_message,) = system.messages(good)
    assert 'Build succeeded' in ok_message and 'check-marker' in ok_message
    assert 'SUCCESS' in ok_message
    (fail_message,) = system.messages(bad)
    assert 'Build failed' in fail_message and 'check-marker' in fail_message
    assert 'FAILURE' in fail_message


def test_gate_of_three_with_a_failing_middle_change(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    store = system.store
    changes = [store.create_change('org/app', 'master', 'First', {'one.txt': '1\n'}),
               store.create_change('org/app', 'master', 'Second', {'FAIL': 'yes\n'}),
               store.create_change('org/app', 'master', 'Third', {'three.txt': '3\n'})]
    wait_for(lambda: all(system.verified(c) for c in changes), timeout=240,
             what='check votes')
    for change in changes:
        store.approve(change, 'Workflow', 1, who='core')
    first, second, third = changes
    wait_for(lambda: store.get_change(first.number).status == 'MERGED' and
             store.get_change(third.number).status == 'MERGED' and
             system.verified(second) == -2, timeout=300, what='gate results')
    assert store.get_change(second.number).status == 'NEW'
    assert 'Build failed' in system.messages(second)[-1]
    # The third change was re-tested without the second: it merged, and
    # the second's FAIL file is not on the branch.
    head = store.branch_head('org/app', 'master')
    files = store.repos.git('org/app', 'ls-tree', '--name-only', head).split()
    assert 'one.txt' in files and 'three.txt' in files and 'FAIL' not in files


def test_change_to_zuul_yaml_runs_its_new_job_and_a_broken_one_is_reported(
        zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    store = system.store
    new_job = textwrap.dedent("""
        - job:
            name: app-extra
            parent: check-marker
        - project:
            check:
              jobs:
                - check-marker
                - app-extra
        """)
    added = store.create_change('org/app', 'master', 'Add a job', {'.zuul.yaml': new_job})
    broken = store.create_change('org/app', 'master', 'Break config', {
        '.zuul.yaml': '- project:\n    check:\n      jobs:\n        - check-marker\n'
                      '- job:\n    name: x\n    timeout: soon\n'})
    wait_for(lambda: system.verified(added) == 1 and system.verified(broken) == -1,
             timeout=240, what='votes')
    assert 'app-extra' in system.messages(added)[-1]
    message = system.messages(broken)[-1]
    assert '.zuul.yaml' in message and ':5' in message and 'timeout' in message


def test_cross_project_depends_on_in_check_and_gate(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    store = system.store
    # check: the app change is tested with the lib change it depends on,
    # so the lib change's FAIL marker fails it.
    bad_lib = store.create_change('org/lib', 'master', 'Lib marker', {'FAIL': 'yes\n'})
    app = store.create_change('org/app', 'master', 'Needs lib', {'app.py': 'x\n'},
                              footer=f'Depends-On: {bad_lib.change_id}')
    wait_for(lambda: system.verified(app) == -1, timeout=240, what='app check vote')
    launch = next(entry for entry in system.launches
                  if entry['change'] == app.number and entry['pipeline'] == 'check')
    assert launch['ahead'] == [bad_lib.number]
    # gate: a good lib change and an app change needing it merge in order.
    lib = store.create_change('org/lib', 'master', 'Lib feature', {'lib.py': 'y\n'})
    app2 = store.create_change('org/app', 'master', 'Uses lib feature', {'use.py': 'z\n'},
                               footer=f'Depends-On: {lib.change_id}')
    wait_for(lambda: system.verified(app2) == 1, timeout=240, what='app2 check vote')
    store.approve(app2, 'Workflow', 1, who='core')   # not enqueued: lib is not merged
    system.settle()
    assert store.get_change(app2.number).status == 'NEW'
    store.approve(lib, 'Workflow', 1, who='core')
    wait_for(lambda: store.get_change(lib.number).status == 'MERGED', timeout=240,
             what='lib merged')
    store.approve(app2, 'Workflow', 1, who='core2')
    wait_for(lambda: store.get_change(app2.number).status == 'MERGED', timeout=240,
             what='app2 merged')


def test_shared_queue_across_two_projects(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    store = system.store
    lib = store.create_change('org/lib', 'master', 'Lib breaks', {'FAIL': 'yes\n'})
    app = store.create_change('org/app', 'master', 'App ok', {'ok.py': '1\n'})
    wait_for(lambda: system.verified(lib) and system.verified(app), timeout=240,
             what='check votes')
    store.approve(lib, 'Workflow', 1, who='core')
    store.approve(app, 'Workflow', 1, who='core')
    wait_for(lambda: store.get_change(app.number).status == 'MERGED' and
             system.verified(lib) == -2, timeout=300, what='gate results')
    gate = [entry for entry in system.launches if entry['pipeline'] == 'gate']
    # One queue for both projects: the app change was first tested on top
    # of the lib change, then again without it once the lib change failed.
    assert {'pipeline': 'gate', 'job': 'check-marker', 'change': app.number,
            'ahead': [lib.number]} in gate
    assert gate[-1] == {'pipeline': 'gate', 'job': 'check-marker', 'change': app.number,
                        'ahead': []}


def test_job_dag_with_a_failing_dependency(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config="""
        - project:
            check:
              jobs:
                - check-marker
                - noop-ok:
                    dependencies: [check-marker]
        """)
    system.start()
    store = system.store
    good = store.create_change('org/app', 'master', 'Good', {'a': '1\n'})
    bad = store.create_change('org/app', 'master', 'Bad', {'FAIL': '1\n'})
    wait_for(lambda: system.verified(good) == 1 and system.verified(bad) == -1,
             timeout=240, what='votes')
    ran = [(e['change'], e['job']) for e in system.launches]
    assert (good.number, 'noop-ok') in ran and (bad.number, 'noop-ok') not in ran
    assert ran.index((good.number, 'check-marker')) < ran.index((good.number, 'noop-ok'))
    message = system.messages(bad)[-1]
    assert 'noop-ok' in message and 'SKIPPED' in message


def test_post_pipeline_runs_on_merged_changes(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config=APP_WITH_POST)
    system.start()
    store = system.store
    change = store.create_change('org/app', 'master', 'Post me', {'p.txt': '1\n'})
    wait_for(lambda: system.verified(change) == 1, timeout=240, what='check vote')
    store.approve(change, 'Workflow', 1, who='core')
    wait_for(lambda: any(e['pipeline'] == 'post' for e in system.launches), timeout=240,
             what='post build')
    system.settle()
    post = [e for e in system.launches if e['pipeline'] == 'post']
    assert post == [{'pipeline': 'post', 'job': 'noop-ok', 'change': 'refs/heads/master',
                     'ahead': []}]


def test_approval_during_a_gerrit_stream_outage_still_gates(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    store, server = system.store, system.gerrit.server
    change = store.create_change('org/app', 'master', 'Survives', {'s.txt': '1\n'})
    wait_for(lambda: system.verified(change) == 1, timeout=240, what='check vote')
    server.accept_streams = False
    server.drop_stream_connections()
    gerrit = system.service.connections.get('gerrit')
    wait_for(lambda: not gerrit.stream.connected.is_set(), what='outage')
    store.approve(change, 'Workflow', 1, who='core')
    server.accept_streams = True
    wait_for(lambda: store.get_change(change.number).status == 'MERGED', timeout=300,
             what='merged after the outage')


APP_WITH_POST = """
- project:
    queue: integrated
    check:
      jobs:
        - check-marker
    gate:
      jobs:
        - check-marker
    post:
      jobs:
        - noop-ok
"""


def test_periodic_pipeline_runs_branch_tips(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config="""
        - project:
            periodic:
              jobs:
                - noop-ok
        """)
    system.start()
    wait_for(lambda: len([e for e in system.launches if e['pipeline'] == 'periodic']) >= 2,
             timeout=120, what='two periodic runs')
    periodic = [e for e in system.launches if e['pipeline'] == 'periodic']
    assert all(e == {'pipeline': 'periodic', 'job': 'noop-ok', 'change': 'refs/heads/master',
                     'ahead': []} for e in periodic)


def test_merged_config_change_reconfigures_the_tenant(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    store = system.store
    config = textwrap.dedent("""
        - job:
            name: app-extra
            parent: noop-ok
        - project:
            queue: integrated
            check:
              jobs:
                - check-marker
                - app-extra
            gate:
              jobs:
                - check-marker
        """)
    change = store.create_change('org/app', 'master', 'Add app-extra', {'.zuul.yaml': config})
    wait_for(lambda: system.verified(change) == 1, timeout=240, what='check vote')
    assert 'app-extra' not in system.scheduler.tenants['example'].layout.jobs
    store.approve(change, 'Workflow', 1, who='core')
    wait_for(lambda: store.get_change(change.number).status == 'MERGED', timeout=240,
             what='merged')
    wait_for(lambda: 'app-extra' in system.scheduler.tenants['example'].layout.jobs,
             timeout=60, what='reconfiguration after the merge')
    later = store.create_change('org/app', 'master', 'Later', {'l.txt': '1\n'})
    wait_for(lambda: system.verified(later) == 1, timeout=240, what='later check vote')
    assert (later.number, 'app-extra') in [(e['change'], e['job']) for e in system.launches]


def test_full_reconfigure_over_rpc_and_a_new_patchset_replaces_the_old(
        zuul_system):  # noqa: F811
    from zuul.lib import rpc_protocol as p
    from zuul.lib.rpc import RPCClient
    system = zuul_system
    system.create_projects()
    system.start()
    store = system.store
    # Direct push to the config project (no review): picked up after a
    # full reconfiguration, as "zuul-scheduler full-reconfigure" asks.
    store.push_branch('org/project-config', 'master', {
        'zuul.d/more.yaml': '- job:\n    name: pushed-job\n    run: playbooks/noop.yaml\n'})
    client = RPCClient('127.0.0.1', system.conf.gearman.port, timeout=120)
    try:
        result = client.call(p.RECONFIGURE, p.RPCRequest())
    finally:
        client.shutdown()
    assert result == {'reconfigured': ['example']}
    assert 'pushed-job' in system.scheduler.tenants['example'].layout.jobs
    # A new patchset: the old one leaves check, only the new one reports.
    change = store.create_change('org/app', 'master', 'Two patchsets', {'FAIL': '1\n'})
    store.add_patchset(change, {'FAIL': None, 'ok.txt': '1\n'})
    wait_for(lambda: system.verified(change) == 1, timeout=240, what='vote on patchset 2')
    system.settle()
    reviews = [r for r in store.review_log if r['change'] == change.number and
               r['user'] == 'zuul']
    assert [r['patchset'] for r in reviews] == [2]


def test_rpc_functions_against_the_real_scheduler(zuul_system):  # noqa: F811
    from zuul.lib import rpc_protocol as p
    from zuul.lib.rpc import RPCClient
    system = zuul_system
    system.create_projects()
    system.start()
    client = RPCClient('127.0.0.1', system.conf.gearman.port, timeout=120)

    def call(function, **kw):
        return client.call(function, p.RPCRequest(**kw))
    try:
        assert call(p.TENANT_LIST) == [{'name': 'example', 'projects': 3, 'queue': 0}]
        status = call(p.STATUS_GET, tenant='example')
        assert {pl['name'] for pl in status['pipelines']} == {
            'check', 'gate', 'post', 'periodic', 'dependents', 'merge-check'}
        jobs = {j['name']: j for j in call(p.JOB_LIST, tenant='example')}
        assert jobs['check-marker']['variants'][0]['source_context']['project'] == \
            'org/project-config'
        frozen = call(p.JOB_GET, tenant='example', job='check-marker', project='org/app',
                      pipeline='check')
        assert [line.split('@')[0] for line in frozen['inheritance_path']] == [
            'variant job base', 'variant job check-marker',
            'project-pipeline variant job check-marker']
        assert frozen['frozen']['timeout'] == 300
        projects = call(p.PROJECT_LIST, tenant='example')
        assert [(e['name'], e['type']) for e in projects] == [
            ('org/app', 'untrusted'), ('org/lib', 'untrusted'),
            ('org/project-config', 'config')]
        app = call(p.PROJECT_GET, tenant='example', project='org/app')
        assert app['configs'][0]['pipelines'][0]['name'] == 'check'
        assert call(p.CONFIG_ERRORS, tenant='example') == []
        assert call(p.KEY_GET, tenant='example', project='org/app').startswith(
            '-----BEGIN PUBLIC KEY-----')
        change = system.store.create_change('org/app', 'master', 'Enqueued', {'e': '1\n'},
                                            owner='developer')
        wait_for(lambda: system.verified(change) == 1, timeout=240, what='check vote')
        result = call(p.ENQUEUE, tenant='example', pipeline='check', project='org/app',
                      change=f'{change.number},1')
        assert result['change'] == f'{change.number},1'
        wait_for(lambda: len(system.messages(change)) == 2, timeout=240, what='second report')
        for kwargs, message in (
                (dict(tenant='nope'), 'Unknown tenant "nope"'),
                (dict(tenant='example', pipeline='nope', project='org/app', change='1,1'),
                 'Unknown pipeline "nope"'),
                (dict(tenant='example', pipeline='check', project='org/nope', change='1,1'),
                 'Unknown project "org/nope"'),
                (dict(tenant='example', pipeline='check', project='org/app', change='1'),
                 'Malformed change "1"')):
            with pytest.raises(p.RPCError, match=message):
                call(p.ENQUEUE, **kwargs)
        # The report is posted before its item leaves the pipeline.
        system.wait_idle()
        with pytest.raises(p.RPCError, match='not found in pipeline check'):
            call(p.DEQUEUE, tenant='example', pipeline='check', project='org/app',
                 change=f'{change.number},1')
    finally:
        client.shutdown()


def test_zuul_cli_against_the_real_scheduler(zuul_system, capsys):  # noqa: F811
    from zuul.cmd.client import main as zuul_main
    system = zuul_system
    system.create_projects()
    system.start()
    conf = ['-c', system.conf.path]
    change = system.store.create_change('org/app', 'master', 'CLI', {'c': '1\n'})
    wait_for(lambda: system.verified(change) == 1, timeout=240, what='check vote')
    assert zuul_main(conf + ['enqueue', '--tenant', 'example', '--pipeline', 'check',
                             '--project', 'org/app', '--change', f'{change.number},1']) == 0
    wait_for(lambda: len(system.messages(change)) == 2, timeout=240, what='second report')
    # The report is visible before its outcome reaches the scheduler's
    # loop (reports are sent off it); the item leaves then.
    system.settle()
    assert zuul_main(conf + ['show', '--tenant', 'example']) == 0
    capsys.readouterr()
    assert zuul_main(conf + ['enqueue', '--tenant', 'example', '--pipeline', 'nope',
                             '--project', 'org/app', '--change', '1,1']) == 1
    assert 'Unknown pipeline "nope"' in capsys.readouterr().err
    assert zuul_main(conf + ['dequeue', '--tenant', 'example', '--pipeline', 'check',
                             '--project', 'org/app', '--change', f'{change.number},1']) == 1
    assert 'not found in pipeline check' in capsys.readouterr().err


def test_build_history_and_zuul_web_on_the_real_scheduler(zuul_system):  # noqa: F811
    import json
    import urllib.request

    from nodepool.zk.localserver import free_port
    from zuul.cmd.web import WebSettings, build_web
    system = zuul_system
    system.create_projects()
    system.start()
    change = system.store.create_change('org/app', 'master', 'History', {'FAIL': '1\n'})
    wait_for(lambda: system.verified(change) == -1, timeout=240, what='check vote')
    system.settle()
    (build,) = system.scheduler.history.get_builds('example', project='org/app')
    assert (build['job_name'], build['result']) == ('check-marker', 'FAILURE')
    port = free_port()
    web, rpc = build_web(WebSettings(gearman_port=system.conf.gearman.port, port=port,
                                     dburi=system.conf.database.dburi))
    web.start()
    try:
        def get(path):
            with urllib.request.urlopen(f'http://127.0.0.1:{port}/api/{path}',
                                        timeout=30) as r:
                return json.load(r)
        builds = get('tenant/example/builds?project=org/app')
        assert [(b['job_name'], b['result']) for b in builds] == [('check-marker', 'FAILURE')]
        status = get('tenant/example/status')
        assert {p['name'] for p in status['pipelines']} >= {'check', 'gate'}
        assert [t['name'] for t in get('tenants')] == ['example']
    finally:
        web.stop()
        rpc.shutdown()


def test_unsafe_variables_are_never_templated(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config="""
        - job:
            name: app-unsafe
            parent: check-unsafe
            vars:
              template: !unsafe '{{ lookup("pipe", "echo INJECTED") }}'
        - project:
            check:
              jobs:
                - app-unsafe
        """)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/unsafe.yaml': '- job:\n    name: check-unsafe\n'
                              '    run: playbooks/check-unsafe.yaml\n',
        'playbooks/check-unsafe.yaml': textwrap.dedent("""
            - hosts: localhost
              gather_facts: false
              tasks:
                - assert:
                    that:
                      - "'lookup' in template"
                      - "template != 'INJECTED'"
            """)})
    system.start()
    change = system.store.create_change('org/app', 'master', 'Unsafe', {'u': '1\n'})
    wait_for(lambda: system.verified(change) != 0, timeout=240, what='check vote')
    assert system.verified(change) == 1, system.messages(change)


def test_zuul_driver_events(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config="""
        - project:
            queue: integrated
            check:
              jobs: [check-marker]
            gate:
              jobs: [check-marker]
            dependents:
              jobs: [noop-ok]
            merge-check:
              jobs: [noop-ok]
        """)
    system.start()
    store = system.store
    parent = store.create_change('org/app', 'master', 'Parent', {'p.txt': '1\n'})
    child = store.create_change('org/app', 'master', 'Child', {'c.txt': '1\n'},
                                parent=parent)
    other = store.create_change('org/app', 'master', 'Other', {'o.txt': '1\n'})
    wait_for(lambda: all(system.verified(c) == 1 for c in (parent, child, other)),
             timeout=240, what='check votes')
    store.approve(parent, 'Workflow', 1, who='core')
    wait_for(lambda: store.get_change(parent.number).status == 'MERGED', timeout=240,
             what='parent merged')
    wait_for(lambda: {(e['pipeline'], e['change']) for e in system.launches} >= {
        ('dependents', child.number), ('merge-check', child.number),
        ('merge-check', other.number)}, timeout=240, what='zuul driver pipelines')
    assert ('dependents', other.number) not in {(e['pipeline'], e['change'])
                                               for e in system.launches}


def test_a_direct_push_of_config_reconfigures_without_blocking(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/pushed.yaml': '- job:\n    name: pushed-later\n    run: playbooks/noop.yaml\n'})
    wait_for(lambda: 'pushed-later' in system.scheduler.tenants['example'].layout.jobs,
             timeout=120, what='reconfiguration after a direct push')
    # A push that does not touch config leaves the layout object alone.
    layout = system.scheduler.tenants['example'].layout
    system.store.push_branch('org/project-config', 'master', {'README': 'more\n'})
    system.settle()
    assert system.scheduler.tenants['example'].layout is layout


def test_project_vars_reach_jobs_under_job_vars(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects(app_config="""
        - job:
            name: app-vars
            parent: check-vars
            vars:
              both: from-job
        - project:
            vars:
              only_project: from-project
              both: from-project
            check:
              jobs:
                - app-vars
        """)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/vars.yaml': '- job:\n    name: check-vars\n    run: playbooks/check-vars.yaml\n',
        'playbooks/check-vars.yaml': textwrap.dedent("""
            - hosts: localhost
              gather_facts: false
              tasks:
                - assert:
                    that:
                      - only_project == 'from-project'
                      - both == 'from-job'
            """)})
    system.start()
    change = system.store.create_change('org/app', 'master', 'Vars', {'v': '1\n'})
    wait_for(lambda: system.verified(change) != 0, timeout=240, what='check vote')
    assert system.verified(change) == 1, system.messages(change)


def test_statsd_metrics_for_queues_and_builds(zuul_system):  # noqa: F811
    system = zuul_system
    system.create_projects()
    system.start()
    change = system.store.create_change('org/app', 'master', 'Metrics', {'m': '1\n'})
    wait_for(lambda: system.verified(change) == 1, timeout=240, what='check vote')
    system.settle()
    metrics = system.metrics()
    names = {line.split(':')[0] for line in metrics}
    assert 'zuul.tenant.example.pipeline.check.current_changes' in names
    # <canonical hostname>.<project>: the connection's server is 127.0.0.1
    assert any(n.startswith('zuul.tenant.example.pipeline.check.project.127_0_0_1.org.app.'
                            'master.job.check-marker.SUCCESS') for n in names), sorted(names)
    assert any(line.endswith('|ms') for line in metrics)


def test_semaphore_keeps_jobs_from_running_at_once(zuul_system, tmp_path):  # noqa: F811
    """Two jobs sharing a ``max: 1`` semaphore: each takes a directory as
    a lock on the executor host and fails if the other holds it, so a
    broken semaphore fails the change; build history shows no overlap."""
    system = zuul_system
    # Under the system's root: the trusted playbooks' sandbox shows it.
    lock = pathlib.Path(system.root) / 'serial-lock'
    system.create_projects(app_config="""
        - project:
            check:
              jobs:
                - serial-one
                - serial-two
        """)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/serial.yaml': textwrap.dedent("""
            - semaphore:
                name: serial
                max: 1
            - job:
                name: serial-base
                run: playbooks/serial.yaml
                semaphore: serial
            - job:
                name: serial-one
                parent: serial-base
            - job:
                name: serial-two
                parent: serial-base
            """),
        'playbooks/serial.yaml': textwrap.dedent(f"""
            - hosts: localhost
              gather_facts: false
              tasks:
                - name: Hold the lock a while; fail if another job holds it
                  shell: mkdir {lock} && sleep 2 && rmdir {lock}
            """)})
    system.start()
    change = system.store.create_change('org/app', 'master', 'Serial', {'s': '1\n'})
    wait_for(lambda: system.verified(change) != 0, timeout=240, what='check vote')
    assert system.verified(change) == 1, system.messages(change)
    system.settle()
    builds = system.scheduler.history.get_builds('example', project='org/app')
    spans = sorted((b['start_time'], b['end_time'], b['job_name']) for b in builds)
    assert [s[2] for s in spans] in (['serial-one', 'serial-two'],
                                     ['serial-two', 'serial-one'])
    assert spans[0][1] <= spans[1][0], spans
    assert system.scheduler.semaphore_handler('example').holders == {}


def test_git_connection_pushes_trigger_a_pipeline(zuul_system, tmp_path):  # noqa: F811
    """A project from a plain git connection: its .zuul.yaml is loaded,
    and a push to it (found by polling) runs the pipeline that a
    ``trigger: <git connection>: ref-updated`` selects."""
    import subprocess

    system = zuul_system
    upstream = tmp_path / 'upstream'
    repo = upstream / 'ext' / 'tool'
    repo.mkdir(parents=True)
    env = {'GIT_AUTHOR_NAME': 'a', 'GIT_AUTHOR_EMAIL': 'a@b', 'GIT_COMMITTER_NAME': 'a',
           'GIT_COMMITTER_EMAIL': 'a@b', 'PATH': '/usr/bin:/bin', 'HOME': str(tmp_path)}

    def git(*args):
        return subprocess.run(['git', *args], cwd=repo, check=True, capture_output=True,
                              text=True, env=env).stdout.strip()
    git('init', '-q', '-b', 'master')
    (repo / '.zuul.yaml').write_text(textwrap.dedent("""
        - project:
            upstream-post:
              jobs:
                - noop-ok
        """))
    git('add', '.zuul.yaml')
    git('commit', '-qm', 'one')
    system.create_projects()
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/upstream.yaml': textwrap.dedent("""
            - pipeline:
                name: upstream-post
                manager: supercedent
                post-review: true
                trigger:
                  upstream:
                    - event: ref-updated
                      ref: ^refs/heads/.*$
            """)})
    system.add_git_connection('upstream', str(upstream), ['ext/tool'])
    system.start()
    connection = system.service.connections.get('upstream')
    assert 'ext/tool' in connection.projects
    wait_for(lambda: 'ext/tool' in connection._refs, timeout=60, what='first poll')
    assert not [x for x in system.launches if x['pipeline'] == 'upstream-post']
    (repo / 'tool.py').write_text('print(1)\n')
    git('add', 'tool.py')
    git('commit', '-qm', 'two')
    head = git('rev-parse', 'HEAD')
    wait_for(lambda: any(x['pipeline'] == 'upstream-post' for x in system.launches),
             timeout=120, what='the pushed commit to run upstream-post')
    system.settle()
    (launch,) = [x for x in system.launches if x['pipeline'] == 'upstream-post']
    assert launch['job'] == 'noop-ok' and launch['change'] == 'refs/heads/master'
    (build,) = [b for b in system.builds if b.job.name == 'noop-ok']
    assert build.result == 'SUCCESS'
    assert build.build_set.item.change.newrev == head


GATE_WAITS_APP = """
- project:
    queue: integrated
    check:
      jobs: [noop-ok]
    gate:
      jobs: [gate-waits]
"""


def test_approval_removed_mid_gate_dequeues_at_once(zuul_system, launcher,  # noqa: F811
                                                    tmp_path):
    """Workflow +1 taken back while the gate job runs on a launched node:
    the item leaves within seconds, its build is stopped and its node
    returned, it is reported as released Zuul does (the gate's failure
    vote and "This change is unable to merge due to a missing merge
    requirement."), and the change behind it merges."""
    system = zuul_system
    _, zk = launcher
    marker = pathlib.Path(system.root) / 'release-gate-jobs'
    system.create_projects(app_config=GATE_WAITS_APP)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/gate-waits.yaml': textwrap.dedent("""
            - job:
                name: gate-waits
                nodeset:
                  nodes:
                    - name: node
                      label: ubuntu-jammy
                run: playbooks/gate-waits.yaml
            """),
        'playbooks/gate-waits.yaml': textwrap.dedent(f"""
            - hosts: localhost
              gather_facts: false
              tasks:
                - name: Run until the test says so
                  wait_for:
                    path: {marker}
                    timeout: 240
            """)})
    system.start()
    store = system.store
    first = store.create_change('org/app', 'master', 'Unapproved later', {'a.txt': '1\n'})
    second = store.create_change('org/app', 'master', 'Behind it', {'b.txt': '1\n'})
    wait_for(lambda: system.verified(first) == 1 and system.verified(second) == 1,
             timeout=240, what='check votes')
    store.approve(first, 'Workflow', 1, who='core')
    store.approve(second, 'Workflow', 1, who='core')
    gate = system.scheduler.tenants['example'].managers['gate']

    def gate_build(change):
        return next((b for b in system.builds if b.job.name == 'gate-waits' and
                     b.build_set.item.change.number == change.number), None)
    wait_for(lambda: gate_build(first) is not None and gate_build(second) is not None and
             gate_build(first).uuid in system.executor.builds, timeout=240,
             what='both gate builds running')
    build = gate_build(first)
    node_ids = set(build.build_set.nodesets['gate-waits'].node_ids)
    assert node_ids
    store.approve(first, 'Workflow', 0, who='core')
    wait_for(lambda: all(i.change.number != first.number for i in gate.all_items()),
             timeout=10, what='the unapproved change to leave the gate')
    assert not marker.exists()
    assert build.canceled and build.result in ('CANCELED', 'ABORTED')
    # the playbook was stopped (it would wait minutes for the marker)
    wait_for(lambda: build.uuid not in system.executor.builds, timeout=30,
             what='the canceled build to stop on the executor')
    wait_for(lambda: not [n for n in zk.get_nodes()
                          if n.id in node_ids and n.state == 'in-use'],
             timeout=30, what='the node of the canceled build to be returned')
    marker.write_text('go\n')
    wait_for(lambda: store.get_change(second.number).status == 'MERGED', timeout=240,
             what='the change behind to merge')
    system.settle()
    assert store.get_change(first.number).status == 'NEW'
    assert system.verified(first) == -2     # the gate's failure vote
    reports = [text for text in system.messages(first)
               if 'missing merge requirement' in text]
    assert reports == ['This change is unable to merge due to a missing merge requirement.']
    assert not [text for text in system.messages(first)
                if 'build failed' in text.lower() or 'merge failed' in text.lower()]
    # the change behind was re-tested without it
    last = [b for b in system.builds if b.build_set.item.change.number == second.number]
    assert last[-1].build_set.dependent_items == ()
