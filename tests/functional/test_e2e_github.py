"""GitHub pull requests gated end to end: a fake GitHub speaking the REST
API and git over real HTTP (tests/fakes/github.py), webhook deliveries
POSTed to zuul-web's /api/connection/github/payload and passed on through
ZooKeeper, the scheduler daemon's
service, zuul-merger, and zuul-executor running real ansible-playbook.
What Zuul reports and merges is read back from the fake GitHub."""

from __future__ import annotations

import pytest

from tests.functional.github_support import GITHUB_PIPELINES, REPO, GithubSide
from tests.functional.system_support import PIPELINES, zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for


@pytest.fixture
def github(zuul_system, tmp_path, zk_chroot):  # noqa: F811
    side = GithubSide(zuul_system, str(tmp_path))
    side.configure()
    zuul_system.create_projects(pipelines=PIPELINES + GITHUB_PIPELINES)
    side.start_web(zk_chroot.client())
    zuul_system.start()
    yield side
    side.stop()


def test_a_pull_request_is_checked_and_gated_into_main(zuul_system, github):  # noqa: F811
    good = github.open_pull('Add a feature', {'feature.txt': 'yes\n'})
    bad = github.open_pull('Break it', {'FAIL': 'yes\n'})
    wait_for(lambda: github.status(good, 'example/gh-check') == 'success' and
             github.status(bad, 'example/gh-check') == 'failure', timeout=240,
             what='check statuses (context <tenant>/<pipeline>)')
    # A start status came first (pending), then the result, per context.
    assert github.fake.repo(REPO)['comments'].get(good['number']) is not None
    assert 'Build succeeded' in github.fake.repo(REPO)['comments'][good['number']][-1]['body']
    # The clone went through the App's installation token (the repo is private).
    assert any(kind == 'token' for method, path, kind in github.fake.requests
               if method == 'GIT')
    # A review by someone without write permission does not gate.
    github.approve(bad, who='visitor')
    github.approve(good)
    wait_for(lambda: github.fake.repo(REPO)['pulls'][good['number']]['merged'],
             timeout=240, what='the approved pull request merged')
    assert github.status(good, 'example/gh-gate') == 'success'
    assert 'feature.txt' in github.branch_files()
    assert not github.fake.repo(REPO)['pulls'][bad['number']]['merged']
    assert github.status(bad, 'example/gh-gate') is None


def test_a_delivery_with_a_bad_signature_changes_nothing(zuul_system, github):  # noqa: F811
    github._number = 40
    assert github.deliver('pull_request', {'action': 'opened', 'pull_request': {
        'number': 41, 'head': {'sha': 'f' * 40}, 'base': {'ref': 'main'}}},
        secret='forged') == 401
    pr = github.open_pull('Real', {'real.txt': 'x\n'})
    wait_for(lambda: github.status(pr, 'example/gh-check') == 'success', timeout=240,
             what='the signed delivery checked')
    assert github.status({'head': {'sha': 'f' * 40}}, 'example/gh-check') is None


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
    # The third was tested on top of the second first (speculatively), then
    # again without it (on the first, or on main once the first merged).
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
    pr = github.open_pull('Needs the lib change', {'uses-lib.txt': 'x\n'})
    pr['body'] = f'Uses the new lib.\n\nDepends-On: {url}\n'
    github.fake.repo(REPO)['pulls'][pr['number']]['body'] = pr['body']
    github.deliver('pull_request', {'action': 'edited', 'pull_request': pr})
    # The Gerrit change is tested under the pull request: its FAIL file fails it.
    wait_for(lambda: github.status(pr, 'example/gh-check') == 'failure', timeout=240,
             what='the pull request checked with its Gerrit dependency')
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
    before = len(github.fake.repo(REPO)['comments'][pr['number']])
    conf = ['-c', zuul_system.conf.path]
    spec = f'{pr["number"]},{pr["head"]["sha"][:12]}'
    assert zuul_main(conf + ['enqueue', '--tenant', 'example', '--pipeline', 'gh-check',
                             '--project', REPO, '--change', spec]) == 0
    wait_for(lambda: len(github.fake.repo(REPO)['comments'][pr['number']]) == before + 1,
             timeout=240, what='the enqueued pull request reported again')
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        zuul_main(conf + ['enqueue', '--tenant', 'example', '--pipeline', 'gh-check',
                          '--project', REPO, '--change', '7,not-a-sha'])
    assert exit_.value.code == 2 and 'NUMBER,SHA' in capsys.readouterr().err


def test_a_rerequested_check_run_runs_its_pipeline_and_reports_through_checks(
        zuul_system, github):  # noqa: F811
    pr = github.open_pull('Checked twice', {'FAIL': 'yes\n'})
    wait_for(lambda: github.status(pr, 'example/gh-check') == 'failure', timeout=240,
             what='the check pipeline')
    assert github.check_runs(pr) == []
    assert github.rerequest_check(pr, 'example/gh-checks-api') == 200
    wait_for(lambda: [r.get('conclusion') for r in github.check_runs(pr)] == ['failure'],
             timeout=240, what='the check run completed')
    (run,) = github.check_runs(pr)   # created in_progress at start, then updated
    assert run['name'] == 'example/gh-checks-api' and run['status'] == 'completed'
    assert 'check-marker' in run['output']['summary']
