"""GitLab merge requests gated end to end: the GitLab stand-in as its own
process (REST API v4, git over HTTP, webhooks; tests/fakes/gitlab),
zuul-web as a real process taking its webhooks and passing them on
through ZooKeeper, the scheduler daemon's service, zuul-merger and
zuul-executor running real ansible-playbook. What Zuul reports and
merges is read back from the stand-in."""

from __future__ import annotations

import json

import pytest

from tests.fakes.gitlab.process import GitlabError
from tests.functional.gitlab_support import GITLAB_PIPELINES, LIB, WIDGET, GitlabSide
from tests.functional.system_support import PIPELINES, zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for

CHECK_OK = 'Build succeeded'
CHECK_FAILED = 'Build failed'


@pytest.fixture
def gitlab(zuul_system, tmp_path, request):  # noqa: F811
    side = GitlabSide(zuul_system, str(tmp_path))
    side.options.update(getattr(request, 'param', None) or {})
    try:
        side.configure()
        zuul_system.create_projects(pipelines=PIPELINES + GITLAB_PIPELINES)
        zuul_system.start()
        side.start_web()
        side.launches = _observe_launches(zuul_system)
        yield side
    finally:
        side.stop()


def _observe_launches(system) -> list[dict]:
    """Every build launched: pipeline, job, the item's change key (or
    ref) and the keys of the items it was tested on top of."""
    launches = []
    adapter = system.service.scheduler.executor
    real = adapter.execute

    def execute(tenant, pipeline, item, job, nodeset, build):
        launches.append({'pipeline': pipeline.name, 'job': job.name,
                         'change': _key(item.change),
                         'ahead': [_key(i.change) for i in
                                   item.current_build_set.dependent_items]})
        return real(tenant, pipeline, item, job, nodeset, build)
    adapter.execute = execute
    return launches


def _key(change) -> str:
    if getattr(change, 'number', None):
        return f'{change.project}!{change.number}'
    return f'{change.project} {change.ref}'


def test_a_merge_request_is_checked_then_gated_and_merged(zuul_system, gitlab):  # noqa: F811
    gl = gitlab.standin
    # GitLab fails the first lookups: they are tried again.
    gl.fault(r'^GET /projects/[^/]+/merge_requests/\d+$', status=502, count=2)
    good = gl.open_mr(WIDGET, 'Add a feature', {'feature.txt': 'yes\n'})
    bad = gl.open_mr(WIDGET, 'Break it', {'FAIL': 'yes\n'})
    wait_for(lambda: gitlab.reported(WIDGET, good, CHECK_OK) and
             gitlab.reported(WIDGET, bad, CHECK_FAILED), timeout=240,
             what='check results commented')
    assert 'check-marker' in gitlab.notes(WIDGET, good)[-1]
    assert gl.mr(WIDGET, good['iid'])['labels'] == ['verified']
    assert gl.mr(WIDGET, bad['iid'])['labels'] == []
    # Approved: gated, and merged by Zuul with the project's method (a
    # merge commit); the failing one is reported and stays open.
    gl.approve(WIDGET, bad['iid'])
    gl.approve(WIDGET, good['iid'])
    wait_for(lambda: gitlab.state(WIDGET, good) == 'merged' and
             len(gitlab.notes(WIDGET, bad)) == 2, timeout=240, what='gate results')
    assert gitlab.state(WIDGET, bad) == 'opened'
    assert CHECK_FAILED in gitlab.notes(WIDGET, bad)[-1]
    assert 'feature.txt' in gl.branch_files(WIDGET)
    head = gl.branch_log(WIDGET)[0]
    assert len(head.split('|')[0].split()) == 2      # a merge commit
    assert f"Merge branch '{good['source_branch']}' into 'main'" in head
    # The merge moved main: the post pipeline ran for it.
    wait_for(lambda: any(launch['pipeline'] == 'gl-post' and
                         launch['change'] == f'{WIDGET} refs/heads/main'
                         for launch in gitlab.launches), timeout=120, what='post job')
    # Zuul's API calls went through its token only.
    assert {r['user'] for r in gl.api_requests() if r['user'] not in
            ('root', 'dev', 'core')} == {'zuul'}


def test_requests_in_a_shared_queue_are_gated_speculatively(zuul_system, gitlab):  # noqa: F811
    gl = gitlab.standin
    first = gl.open_mr(WIDGET, 'First', {'one.txt': '1\n'})
    second = gl.open_mr(WIDGET, 'Second', {'FAIL': 'yes\n'})
    third = gl.open_mr(LIB, 'Third', {'three.txt': '3\n'})
    fourth = gl.open_mr(LIB, 'Fourth', {'four.txt': '4\n'})
    mrs = [(WIDGET, first), (WIDGET, second), (LIB, third), (LIB, fourth)]
    wait_for(lambda: all(len(gitlab.notes(p, mr)) == 1 for p, mr in mrs), timeout=300,
             what='check results')
    for project, mr in mrs:
        gl.approve(project, mr['iid'])
    wait_for(lambda: [gitlab.state(p, mr) for p, mr in mrs] ==
             ['merged', 'opened', 'merged', 'merged'] and
             len(gitlab.notes(WIDGET, second)) == 2, timeout=400, what='gate results')
    assert CHECK_FAILED in gitlab.notes(WIDGET, second)[-1]
    # The third was tested behind the second (widget and lib share the
    # queue), then again without it.
    tested_third = [launch['ahead'] for launch in gitlab.launches
                    if launch['pipeline'] == 'gl-gate' and launch['change'] == f'{LIB}!1']
    assert tested_third[0] == [f'{WIDGET}!1', f'{WIDGET}!2']
    assert f'{WIDGET}!2' not in tested_third[-1]
    files = gl.branch_files(WIDGET)
    assert 'one.txt' in files and 'FAIL' not in files
    # acme/lib merges fast-forward only: the fourth was rebased onto the
    # third by GitLab before it was merged; no merge commits.
    assert [line.split('|')[1] for line in gl.branch_log(LIB)] == ['Fourth', 'Third',
                                                                   'Initial']
    assert all(len(line.split('|')[0].split()) <= 1 for line in gl.branch_log(LIB))


def test_depends_on_within_gitlab_and_across_to_gerrit(zuul_system, gitlab):  # noqa: F811
    gl = gitlab.standin
    store = zuul_system.store
    broken = store.create_change('org/lib', 'master', 'Break lib', {'FAIL': 'yes\n'})
    needs_gerrit = gl.open_mr(WIDGET, 'Needs the Gerrit change', {'a.txt': '1\n'},
                              description=f'Depends-On: https://127.0.0.1/c/org/lib/+/'
                                          f'{broken.number}')
    failing_mr = gl.open_mr(LIB, 'A failing lib request', {'FAIL': 'yes\n'})
    needs_mr = gl.open_mr(WIDGET, 'Needs the lib request', {'b.txt': '1\n'},
                          description=f'Depends-On: {failing_mr["web_url"]}')
    wait_for(lambda: gitlab.reported(WIDGET, needs_gerrit, CHECK_FAILED) and
             gitlab.reported(WIDGET, needs_mr, CHECK_FAILED), timeout=300,
             what='requests checked with their dependencies')
    tested = {launch['change']: launch['ahead'] for launch in gitlab.launches
              if launch['pipeline'] == 'gl-check'}
    assert tested[f'{WIDGET}!{needs_mr["iid"]}'] == [f'{LIB}!{failing_mr["iid"]}']
    # And the other way: a Gerrit change depending on a merge request.
    plain = gl.open_mr(LIB, 'Marker', {'FAIL': 'yes\n', 'x.txt': '1\n'})
    needs = store.create_change('org/app', 'master',
                                f'Needs the MR\n\nDepends-On: {plain["web_url"]}',
                                {'app.txt': 'y\n'})
    wait_for(lambda: zuul_system.verified(needs) == -1, timeout=240,
             what='the Gerrit change checked with its GitLab dependency')
    assert 'check-marker' in zuul_system.messages(needs)[-1]


def test_in_repo_config_on_a_merge_request_is_tested_speculatively(
        zuul_system, gitlab):  # noqa: F811
    gl = gitlab.standin
    config = """
    - job:
        name: mr-only
        run: playbooks/mr-only.yaml
    - project:
        queue: gl-integrated
        gl-check:
          jobs:
            - mr-only
        gl-gate:
          jobs:
            - mr-only
    """
    playbook = """
    - hosts: localhost
      gather_facts: false
      tasks:
        - debug:
            msg: "{{ zuul.change }} {{ zuul.change_url }}"
    """
    mr = gl.open_mr(WIDGET, 'A new job', {'.zuul.yaml': config,
                                          'playbooks/mr-only.yaml': playbook})
    broken = gl.open_mr(WIDGET, 'A broken job', {'.zuul.yaml': '- job:\n    nme: x\n'})
    wait_for(lambda: gitlab.reported(WIDGET, mr, CHECK_OK) and
             len(gitlab.notes(WIDGET, broken)) == 1, timeout=240,
             what='both reported')
    assert 'mr-only' in gitlab.notes(WIDGET, mr)[-1]
    assert 'check-marker' not in gitlab.notes(WIDGET, mr)[-1]
    assert [launch['job'] for launch in gitlab.launches
            if launch['change'] == f'{WIDGET}!{mr["iid"]}'] == ['mr-only']
    error = gitlab.notes(WIDGET, broken)[-1]
    assert '.zuul.yaml' in error and 'nme' in error
    # Nothing of it reached main.
    assert 'playbooks' not in gl.branch_files(WIDGET)
    # Gated and merged: the push to main reconfigures the tenant, and a
    # new request runs the new job from main.
    gl.approve(WIDGET, mr['iid'])
    wait_for(lambda: gitlab.state(WIDGET, mr) == 'merged', timeout=240, what='merged')
    later = gl.open_mr(WIDGET, 'After the merge', {'later.txt': '1\n'})
    wait_for(lambda: gitlab.reported(WIDGET, later, CHECK_OK), timeout=240,
             what='the next request checked')
    assert 'mr-only' in gitlab.notes(WIDGET, later)[-1]


def test_branch_and_tag_pushes_run_post_and_tag_pipelines(zuul_system, gitlab):  # noqa: F811
    gl = gitlab.standin
    sha = gl.commit(WIDGET, 'main', {'direct.txt': '1\n'}, 'A direct push', user='core')
    gl.request('POST', f'/projects/{WIDGET.replace("/", "%2F")}/repository/tags',
               {'tag_name': 'v1.0', 'ref': 'main'}, user='core')
    wait_for(lambda: {(launch['pipeline'], launch['change']) for launch in gitlab.launches}
             >= {('gl-post', f'{WIDGET} refs/heads/main'),
                 ('gl-tag', f'{WIDGET} refs/tags/v1.0')}, timeout=180,
             what='post and tag jobs')
    zuul_system.wait_idle()
    builds = zuul_system.build_history(project=WIDGET)
    assert {(b['pipeline'], b['ref'], b['result']) for b in builds} == {
        ('gl-post', 'refs/heads/main', 'SUCCESS'), ('gl-tag', 'refs/tags/v1.0', 'SUCCESS')}
    assert {b['newrev'] for b in builds} == {sha}


def test_bad_tokens_and_malformed_webhooks_are_refused(zuul_system, gitlab):  # noqa: F811
    gl = gitlab.standin
    # A second webhook with a wrong secret: each event comes twice, once
    # refused.
    gl.add_hook(WIDGET, gitlab.payload_url, 'not-the-secret')
    mr = gl.open_mr(WIDGET, 'Once only', {'once.txt': '1\n'})
    wait_for(lambda: gitlab.reported(WIDGET, mr, CHECK_OK), timeout=240, what='check')
    gl.wait_deliveries()
    statuses = [d['status'] for d in gl.deliveries()]
    assert statuses.count(401) == statuses.count(200) > 0
    assert gitlab.post(b'{"object_kind": "merge_request"}') == 400
    assert gitlab.post(b'not json') == 400
    assert gitlab.post(json.dumps({'object_kind': 'merge_request', 'project': {
        'path_with_namespace': WIDGET}, 'object_attributes': {
        'iid': mr['iid'], 'action': 'reopen'}}).encode(), token=None) == 401
    zuul_system.wait_idle()
    assert len(gitlab.notes(WIDGET, mr)) == 1
    assert [launch['change'] for launch in gitlab.launches] == [f'{WIDGET}!{mr["iid"]}']
    log = gitlab.web_log()
    assert 'X-Gitlab-Token does not match the webhook_token' in log
    assert 'no X-Gitlab-Token header' in log


def test_events_while_zuul_web_was_down_are_caught_up(zuul_system, gitlab):  # noqa: F811
    gl = gitlab.standin
    checked = gl.open_mr(WIDGET, 'Checked before', {'before.txt': '1\n'})
    wait_for(lambda: gitlab.reported(WIDGET, checked, CHECK_OK), timeout=240, what='check')
    gitlab.stop_web()
    missed = gl.open_mr(WIDGET, 'Opened while down', {'down.txt': '1\n'})
    gl.approve(WIDGET, checked['iid'])
    gl.wait_deliveries()
    assert gl.deliveries()[-1]['status'] is None          # GitLab could not deliver
    gitlab.start_web()
    wait_for(lambda: gitlab.reported(WIDGET, missed, CHECK_OK) and
             gitlab.state(WIDGET, checked) == 'merged', timeout=300,
             what='the missed request checked and the approved one merged')
    zuul_system.wait_idle()
    assert len(gitlab.notes(WIDGET, missed)) == 1


def test_a_request_opened_while_no_scheduler_ran_is_checked(zuul_system, gitlab):  # noqa: F811
    gl = gitlab.standin
    opened = []

    def down():
        # zuul-web answers GitLab and keeps the delivery in ZooKeeper.
        opened.append(gl.open_mr(WIDGET, 'While down', {'down.txt': '1\n'}))
        gl.wait_deliveries()
        assert {d['status'] for d in gl.deliveries()} == {200}
    zuul_system.restart_scheduler(down=down)
    wait_for(lambda: gitlab.reported(WIDGET, opened[0], CHECK_OK), timeout=240,
             what='the request checked by the new scheduler')


def test_a_merge_gitlab_refuses_is_reported_and_the_request_stays_open(
        zuul_system, gitlab):  # noqa: F811
    gl = gitlab.standin
    # Only owners may merge into main now; the Zuul user is a maintainer.
    path = f'/projects/{WIDGET.replace("/", "%2F")}/protected_branches'
    with pytest.raises(GitlabError) as exists:
        gl.request('POST', path, {'name': 'main', 'merge_access_level': 50})
    assert exists.value.status == 409
    gl.request('DELETE', path + '/main')
    gl.request('POST', path, {'name': 'main', 'push_access_level': 40,
                              'merge_access_level': 50})
    mr = gl.open_mr(WIDGET, 'Not for Zuul to merge', {'no.txt': '1\n'})
    wait_for(lambda: gitlab.reported(WIDGET, mr, CHECK_OK), timeout=240, what='check')
    gl.approve(WIDGET, mr['iid'])
    wait_for(lambda: gitlab.reported(WIDGET, mr, 'Merge Failed'), timeout=240,
             what='the merge failure reported')
    assert gitlab.state(WIDGET, mr) == 'opened'
    assert 'no.txt' not in gl.branch_files(WIDGET)
    assert any(r['method'] == 'PUT' and r['path'].endswith('/merge') and r['user'] == 'zuul'
               for r in gl.api_requests())


# A held request is answered late, not timed out and retried: the
# fallback after all retries (the scheduler reading the change itself)
# is not what this test is about.
@pytest.mark.parametrize('gitlab', [{'request_timeout': '600'}], indirect=True)
def test_a_gitlab_that_does_not_answer_holds_up_no_other_change(
        zuul_system, gitlab):  # noqa: F811
    gl = gitlab.standin
    gl.hold(r'^GET /projects/acme%2Fwidget/merge_requests/\d+$')
    mr = gl.open_mr(WIDGET, 'Slow', {'slow.txt': '1\n'})
    wait_for(lambda: gl.held() >= 1, timeout=60, what="Zuul's GitLab call held")
    # Meanwhile a Gerrit change of the same tenant goes through check.
    change = zuul_system.store.create_change('org/app', 'master', 'Meanwhile',
                                             {'meanwhile.txt': '1\n'})
    wait_for(lambda: zuul_system.verified(change) == 1, timeout=240,
             what='the Gerrit change checked while GitLab does not answer')
    assert gl.held() >= 1 and not gitlab.notes(WIDGET, mr)
    gl.release()
    wait_for(lambda: gitlab.reported(WIDGET, mr, CHECK_OK), timeout=240,
             what='the merge request checked once GitLab answers')
