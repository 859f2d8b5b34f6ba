"""GitHub pull requests gated end to end: a fake GitHub speaking the REST
API and git over real HTTP (tests/fakes/github.py), real webhook payloads
POSTed to zuul-web's /api/connection/github/payload and passed on through
ZooKeeper, the scheduler daemon's service, zuul-merger, and zuul-executor
running real ansible-playbook. What Zuul reports and merges is read back
from the fake GitHub, which refuses what GitHub refuses and sends the
webhooks GitHub sends after a merge."""

from __future__ import annotations

import os

import pytest

from tests.functional.github_support import (
    GITHUB_PIPELINES,
    REPO,
    GithubSide,
    github_config_files,
)
from tests.functional.system_support import PIPELINES, zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for


@pytest.fixture
def github(zuul_system, tmp_path, zk_chroot):  # noqa: F811
    side = GithubSide(zuul_system, str(tmp_path))
    side.configure()
    side.marker = os.path.join(zuul_system.root, 'release-gh-waits')  # seen by trusted jobs
    zuul_system.create_projects(pipelines=PIPELINES + GITHUB_PIPELINES,
                                config_files=github_config_files(side.marker))
    side.start_web(zk_chroot.client())
    zuul_system.start()
    yield side
    side.stop()


def _build(system, pr, job='gh-waits', pipeline=None):
    """The latest build of ``job`` for ``pr`` (in ``pipeline``)."""
    found = [b for launch, b in zip(system.launches, system.builds)
             if b.job.name == job and launch['change'] == pr['number'] and
             (pipeline is None or launch['pipeline'] == pipeline)]
    return found[-1] if found else None


def _running(system, pr, pipeline=None):
    build = _build(system, pr, pipeline=pipeline)
    return build is not None and build.uuid in system.executor.builds


def _items(system, pipeline):
    manager = system.scheduler.tenants['example'].managers[pipeline]
    return [i.change.number for i in manager.all_items()]


def test_a_pull_request_is_checked_and_gated_into_main(zuul_system, github):  # noqa: F811
    good = github.open_pull('Add a feature', {'feature.txt': 'yes\n'})
    bad = github.open_pull('Break it', {'FAIL': 'yes\n'})
    wait_for(lambda: github.status(good, 'example/gh-check') == 'success' and
             github.status(bad, 'example/gh-check') == 'failure', timeout=240,
             what='check statuses (context <tenant>/<pipeline>)')
    assert 'Build succeeded' in github.comments(good)[-1]
    # The clone went through the App's installation token (the repo is private).
    assert any(kind == 'token' for method, path, kind in github.fake.requests
               if method == 'GIT')
    # A review by someone without write permission does not gate.
    github.approve(bad, who='visitor')
    github.approve(good)
    wait_for(lambda: github.pull(good)['merged'], timeout=240,
             what='the approved pull request merged')
    assert github.status(good, 'example/gh-gate') == 'success'
    assert 'feature.txt' in github.branch_files()
    assert not github.pull(bad)['merged']
    assert github.status(bad, 'example/gh-gate') is None


def test_the_gate_merge_commit_holds_the_pull_requests_title_and_body(
        zuul_system, github):  # noqa: F811
    pr = github.open_pull('Teach the widget to spin',
                          {'spin.txt': 'yes\n'}, body='It spins now.\n\nCloses #12.')
    wait_for(lambda: github.status(pr, 'example/gh-check') == 'success', timeout=240,
             what='check')
    github.approve(pr)
    wait_for(lambda: github.pull(pr)['merged'], timeout=240, what='the gate merge')
    message = github.last_commit()
    assert message.splitlines()[0] == 'Teach the widget to spin'
    assert 'It spins now.\n\nCloses #12.' in message
    assert 'Reviewed-by: core' in message
    assert 'Build succeeded' not in message
    assert github.fake.repo(REPO)['merges'] == [{'number': pr['number'], 'method': 'merge'}]


def test_merged_and_pushed_zuul_yaml_changes_reach_the_layout(zuul_system, github):  # noqa
    layout = lambda: zuul_system.scheduler.tenants['example'].layout  # noqa: E731
    new_job = """
- job:
    name: {name}
    run: playbooks/noop.yaml
- project:
    gh-check:
      jobs:
        - check-marker
        - {name}
    gh-gate:
      jobs:
        - check-marker
"""
    noop = '- hosts: localhost\n  gather_facts: false\n  tasks: []\n'
    pr = github.open_pull('Add a job', {'.zuul.yaml': new_job.format(name='gh-from-pr'),
                                        'playbooks/noop.yaml': noop})
    wait_for(lambda: github.status(pr, 'example/gh-check') == 'success', timeout=240,
             what='the speculative check of the config change')
    assert 'gh-from-pr' not in layout().jobs
    github.approve(pr)
    wait_for(lambda: github.pull(pr)['merged'], timeout=240, what='the gate merge')
    # GitHub's push after the merge reconfigures the tenant.
    wait_for(lambda: 'gh-from-pr' in layout().jobs, timeout=60,
             what='the merged job in the layout')
    # A direct push too.
    github.push_to_main({'.zuul.yaml': new_job.format(name='gh-from-push')}, 'Direct push')
    wait_for(lambda: 'gh-from-push' in layout().jobs, timeout=60,
             what='the pushed job in the layout')
    later = github.open_pull('After the push', {'x.txt': '1\n'})
    wait_for(lambda: github.status(later, 'example/gh-check') == 'success', timeout=240,
             what='a check with the new layout')
    # The status and the comment are two calls; the comment may come second.
    wait_for(lambda: github.comments(later), timeout=30, what='the check report comment')
    assert 'gh-from-push' in github.comments(later)[-1]


def test_a_closed_pr_leaves_check_and_a_dismissed_approval_leaves_the_gate(
        zuul_system, github):  # noqa: F811
    closing = github.open_pull('Will be closed', {'WAIT': '1\n'})
    wait_for(lambda: _running(zuul_system, closing), timeout=240,
             what='the check build running')
    build = _build(zuul_system, closing)
    github.close(closing)
    wait_for(lambda: closing['number'] not in _items(zuul_system, 'gh-check'), timeout=20,
             what='the closed pull request to leave the check pipeline')
    assert build.canceled and build.result in ('CANCELED', 'ABORTED')
    wait_for(lambda: build.uuid not in zuul_system.executor.builds, timeout=30,
             what='the canceled build to stop')
    assert github.status(closing, 'example/gh-check') == 'pending'

    gated = github.open_pull('Approval taken back', {'WAIT': '1\n'})
    wait_for(lambda: _running(zuul_system, gated, 'gh-check'), timeout=240,
             what='its check build')
    with open(github.marker, 'w') as f:
        f.write('go\n')
    wait_for(lambda: github.status(gated, 'example/gh-check') == 'success', timeout=240,
             what='its check')
    os.unlink(github.marker)
    review = github.approve(gated)
    wait_for(lambda: _running(zuul_system, gated, 'gh-gate'), timeout=240,
             what='the gate build running')
    build = _build(zuul_system, gated, pipeline='gh-gate')
    github.dismiss(gated, review)
    wait_for(lambda: gated['number'] not in _items(zuul_system, 'gh-gate'), timeout=20,
             what='the pull request to leave the gate')
    assert build.canceled
    with open(github.marker, 'w') as f:
        f.write('go\n')
    zuul_system.settle()
    assert not github.pull(gated)['merged']
    assert github.fake.repo(REPO)['merges'] == []
    assert not [c for c in github.comments(gated) if 'failed' in c.lower()]


def test_a_draft_and_a_pr_missing_a_required_status_are_not_gated(
        zuul_system, github):  # noqa: F811
    github.fake.repo(REPO)['protected']['main'] = {
        'contexts': ['ci/external', 'example/gh-gate'], 'reviews': 1}
    draft = github.open_pull('Not ready', {'d.txt': '1\n'}, draft=True)
    missing = github.open_pull('No external CI yet', {'m.txt': '1\n'})
    wait_for(lambda: github.status(draft, 'example/gh-check') == 'success' and
             github.status(missing, 'example/gh-check') == 'success', timeout=240,
             what='both checked')
    github.approve(draft)
    github.approve(missing)
    wait_for(lambda: any('can not be merged' in c for c in github.comments(draft)) and
             any('can not be merged' in c for c in github.comments(missing)),
             timeout=60, what='both refused with a reason')
    assert any('draft' in c for c in github.comments(draft))
    assert any('required status check "ci/external" is expected' in c
               for c in github.comments(missing))
    assert not [launch for launch in zuul_system.launches if launch['pipeline'] == 'gh-gate']
    # With the external status the same pull request gates: the gate's
    # own required context is Zuul's to set.
    github.fake.repo(REPO)['statuses'][missing['head']['sha']].append(
        {'state': 'success', 'context': 'ci/external', 'creator': {'login': 'ci'}})
    github.approve(missing)
    wait_for(lambda: github.pull(missing)['merged'], timeout=240, what='the gate merge')
    assert not github.pull(draft)['merged']


def test_exhausting_the_github_rate_limit_leaves_gerrit_tenants_moving(
        zuul_system, github):  # noqa: F811
    running = github.open_pull('Reports while rate-limited', {'WAIT': '1\n'})
    wait_for(lambda: _running(zuul_system, running, 'gh-check'), timeout=240,
             what='its check build')
    github.fake.rate_limit = 0
    github.fake.rate_reset_after = 3600
    # Its result is reported, and a new pull request's event read, while
    # GitHub answers nothing but "rate limit exceeded" for an hour.
    with open(github.marker, 'w') as f:
        f.write('go\n')
    wait_for(lambda: running['number'] not in _items(zuul_system, 'gh-check') or
             _build(zuul_system, running).result is not None, timeout=240,
             what='its build to end')
    pr = github.open_pull('Waits for the rate limit', {'r.txt': '1\n'})
    change = zuul_system.store.create_change('org/app', 'master', 'Gerrit goes on',
                                             {'g.txt': '1\n'})
    wait_for(lambda: zuul_system.verified(change) == 1, timeout=90,
             what='the Gerrit change checked while GitHub is rate-limited')
    assert github.status(pr, 'example/gh-check') is None
    assert github.status(running, 'example/gh-check') == 'pending'
    github_conn = zuul_system.service.connections.get('github')
    assert github_conn.workers_busy() >= 2     # the report and the event wait


def test_the_check_runs_abort_button_dequeues(zuul_system, github):  # noqa: F811
    pr = github.open_pull('Checked twice', {'WAIT': '1\n'})
    wait_for(lambda: _running(zuul_system, pr, 'gh-check'), timeout=240,
             what='the check build')
    with open(github.marker, 'w') as f:
        f.write('go\n')
    wait_for(lambda: github.status(pr, 'example/gh-check') == 'success', timeout=240,
             what='the check pipeline')
    os.unlink(github.marker)
    assert github.rerequest_check(pr, 'example/gh-checks-api') == 200
    wait_for(lambda: _running(zuul_system, pr, 'gh-checks-api'), timeout=240,
             what='the checks-api build')
    (run,) = github.check_runs(pr)
    assert run['status'] == 'in_progress'
    assert [a['identifier'] for a in run['actions']] == ['abort']
    build = _build(zuul_system, pr, pipeline='gh-checks-api')
    assert github.abort_check(pr, 'example/gh-checks-api') == 200
    wait_for(lambda: pr['number'] not in _items(zuul_system, 'gh-checks-api'), timeout=20,
             what='the aborted item to leave')
    assert build.canceled


def test_a_delivery_with_a_bad_signature_changes_nothing(zuul_system, github):  # noqa: F811
    from tests.fakes import github_payloads as payloads
    forged = github.open_pull('Forged', {'forged.txt': 'x\n'}, deliver=False)
    opened = payloads.pull_request_event('opened', github.repository, forged, 'mallory')
    assert github.deliver('pull_request', opened, secret='forged') == 401
    assert github.deliver('pull_request', opened, secret='forged', signatures=('sha1',)) == 401
    assert github.deliver('pull_request', opened, signatures=()) == 401
    # Signed with SHA-1 only (X-Hub-Signature), as older GitHub Enterprise does.
    real = github.open_pull('Real', {'real.txt': 'x\n'}, deliver=False)
    assert github.deliver('pull_request', payloads.pull_request_event(
        'opened', github.repository, real, 'alice'), signatures=('sha1',)) == 200
    wait_for(lambda: github.status(real, 'example/gh-check') == 'success', timeout=240,
             what='the signed delivery checked')
    zuul_system.settle()
    # The forged pull request exists, yet nothing asked GitHub about it.
    assert github.status(forged, 'example/gh-check') is None
    assert not [p for _, p, _ in github.fake.requests
                if p.endswith(f'/pulls/{forged["number"]}')]


def test_three_pull_requests_gated_together_and_a_failing_middle_one_left_out(
        zuul_system, github):  # noqa: F811
    prs = [github.open_pull('First', {'one.txt': '1\n'}),
           github.open_pull('Second', {'FAIL': 'yes\n'}),
           github.open_pull('Third', {'three.txt': '3\n'})]
    wait_for(lambda: all(github.status(pr, 'example/gh-check') for pr in prs),
             timeout=240, what='check statuses')
    for pr in prs:
        github.approve(pr)
    first, second, third = prs
    pulls = github.fake.repo(REPO)['pulls']
    wait_for(lambda: pulls[1]['merged'] and pulls[3]['merged'] and
             github.status(second, 'example/gh-gate') == 'failure', timeout=300,
             what='gate results')
    assert not pulls[2]['merged']
    tested_third = [launch['ahead'] for launch in zuul_system.launches
                    if launch['pipeline'] == 'gh-gate' and launch['change'] == 3]
    assert [1, 2] in tested_third and tested_third[-1] in ([1], [])
    files = github.branch_files()
    assert 'one.txt' in files and 'three.txt' in files and 'FAIL' not in files
    assert [m['number'] for m in github.fake.repo(REPO)['merges']] == [1, 3]


def test_depends_on_across_github_and_gerrit(zuul_system, github):  # noqa: F811
    store = zuul_system.store
    broken = store.create_change('org/lib', 'master', 'Break lib', {'FAIL': 'yes\n'})
    url = f'https://127.0.0.1/c/org/lib/+/{broken.number}'
    # Opened with its Depends-On: the event that enqueues it names it.
    pr = github.open_pull('Needs the lib change', {'uses-lib.txt': 'x\n'},
                          body=f'Uses the new lib.\n\nDepends-On: {url}\n')
    wait_for(lambda: github.status(pr, 'example/gh-check') == 'failure', timeout=240,
             what='the pull request checked with its Gerrit dependency')
    tested = [launch['ahead'] for launch in zuul_system.launches
              if launch['pipeline'] == 'gh-check' and launch['change'] == pr['number']]
    assert tested and all(broken.number in ahead for ahead in tested)
    # And the other way: a Gerrit change depending on a pull request.
    plain = github.open_pull('Marker', {'FAIL': 'yes\n'})
    needs_pr = store.create_change(
        'org/app', 'master',
        f'Needs the PR\n\nDepends-On: https://github.com/{REPO}/pull/{plain["number"]}',
        {'app.txt': 'y\n'})
    wait_for(lambda: zuul_system.verified(needs_pr) == -1, timeout=240,
             what='the Gerrit change checked with its GitHub dependency')
    assert 'check-marker' in zuul_system.messages(needs_pr)[-1]


def test_zuul_enqueue_takes_a_pull_request(zuul_system, github, capsys):  # noqa: F811
    from zuul.cmd.client import main as zuul_main
    pr = github.open_pull('Once', {'once.txt': '1\n'})
    wait_for(lambda: github.status(pr, 'example/gh-check') == 'success', timeout=240,
             what='first check')
    before = len(github.comments(pr))
    conf = ['-c', zuul_system.conf.path]
    spec = f'{pr["number"]},{pr["head"]["sha"][:12]}'
    assert zuul_main(conf + ['enqueue', '--tenant', 'example', '--pipeline', 'gh-check',
                             '--project', REPO, '--change', spec]) == 0
    wait_for(lambda: len(github.comments(pr)) == before + 1,
             timeout=240, what='the enqueued pull request reported again')
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        zuul_main(conf + ['enqueue', '--tenant', 'example', '--pipeline', 'gh-check',
                          '--project', REPO, '--change', '7,not-a-sha'])
    assert exit_.value.code == 2 and 'NUMBER,SHA' in capsys.readouterr().err


def test_work_waiting_on_github_survives_a_scheduler_restart(zuul_system, github):  # noqa
    """A delivery being read and a gate merge being sent, both held up by
    the rate limit, when the scheduler stops: the delivery is still in
    ZooKeeper, the gate item in the saved state; the next scheduler checks
    the one and merges the other, once."""
    gated = github.open_pull('Merge across a restart', {'WAIT': '1\n'})
    wait_for(lambda: _running(zuul_system, gated, 'gh-check'), timeout=240,
             what='its check build')
    with open(github.marker, 'w') as f:
        f.write('go\n')
    wait_for(lambda: github.status(gated, 'example/gh-check') == 'success', timeout=240,
             what='its check')
    os.unlink(github.marker)
    github.approve(gated)
    wait_for(lambda: _running(zuul_system, gated, 'gh-gate'), timeout=240,
             what='its gate build')
    github.fake.rate_limit = 0
    github.fake.rate_reset_after = 3600
    with open(github.marker, 'w') as f:
        f.write('go\n')
    gate = zuul_system.scheduler.tenants['example'].managers['gh-gate']
    wait_for(lambda: any(i.pending_report for i in gate.all_items()), timeout=240,
             what='the gate merge waiting on GitHub')
    waiting = github.open_pull('Read across a restart', {'w.txt': '1\n'})
    connection = zuul_system.service.connections.get('github')
    wait_for(lambda: connection.workers_busy() >= 2, timeout=30,
             what='the delivery waiting on GitHub')

    def down():
        github.fake.rate_limit = None
    zuul_system.restart_scheduler(down=down)
    wait_for(lambda: github.status(waiting, 'example/gh-check') == 'success', timeout=240,
             what='the waiting delivery checked by the next scheduler')
    wait_for(lambda: github.pull(gated)['merged'], timeout=240,
             what='the gate item merged by the next scheduler')
    zuul_system.settle()
    assert [m['number'] for m in github.fake.repo(REPO)['merges']] == [gated['number']]
