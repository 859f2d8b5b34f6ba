"""The merger's wire payloads and where repos are fetched from."""

from __future__ import annotations

import base64
import json
import shlex

import pytest

from zuul.merger.client import merge_item_for
from zuul.merger.protocol import (
    FUNCTIONS,
    CatRequest,
    MergeItem,
    MergeRequest,
    MergeResult,
    ProjectFiles,
    ProtocolVersionError,
    RefStateResult,
)
from zuul.merger.repos import (
    RepoUrlResolver,
    UnknownConnectionError,
    check_project_name,
    fetched_ref,
)
from zuul.model.change import Change, Ref
from zuul.model.item import QueueItem


def test_function_names_are_the_architecture_contract():
    assert FUNCTIONS == ('merger:merge', 'merger:cat', 'merger:refstate',
                         'merger:fileschanges')


def test_merge_payloads_round_trip_through_json():
    items = [MergeItem('gerrit', 'org/a', 'master', 'refs/changes/01/1/2', 1, 2, 'rebase'),
             MergeItem('gerrit', 'org/b', 'master', 'refs/heads/master', newrev='f' * 40)]
    request = MergeRequest(items=items, repo_state={'gerrit': {'org/a': {
        'refs/heads/master': 'a' * 40}}}, read_files=['zuul.d/'], event_id='ev1')
    assert MergeRequest.from_json(request.to_json()) == request
    result = MergeResult(merged=False, conflict=items[0], event_id='ev1',
                         read_files=[ProjectFiles('gerrit', 'org/a', 'master', {'x': 'y'})])
    back = MergeResult.from_json(result.to_json())
    assert back == result and isinstance(back.conflict, MergeItem)
    assert isinstance(back.read_files[0], ProjectFiles)


def test_a_newer_peer_may_add_fields():
    data = json.loads(CatRequest('gerrit', 'org/a', 'master', ['zuul.yaml']).to_json())
    data['shiny_new_option'] = True
    assert CatRequest.from_dict(data).files == ['zuul.yaml']


@pytest.mark.parametrize('version', [None, 0, 2])
def test_another_schema_version_is_refused(version):
    data = RefStateResult(updated=True).to_dict()
    data['version'] = version
    with pytest.raises(ProtocolVersionError):
        RefStateResult.from_json(json.dumps(data))


@pytest.mark.parametrize('raw', [b'not json', b'[1, 2]', b'{"version": 1}',
                                 b'{"version": 1, "items": [{"project": "x"}]}'])
def test_malformed_payloads_raise_value_or_type_errors(raw):
    with pytest.raises((ValueError, TypeError)):
        MergeRequest.from_json(raw)


def test_queue_items_become_merge_items():
    change = Change('gerrit', 'org/a', 'refs/changes/34/1234/5', number=1234, patchset=5,
                    branch_name='stable/x')
    assert merge_item_for(QueueItem(change), 'cherry-pick') == MergeItem(
        'gerrit', 'org/a', 'stable/x', 'refs/changes/34/1234/5', 1234, 5, 'cherry-pick')
    ref = Ref('gerrit', 'org/a', 'refs/heads/master', oldrev='1' * 40, newrev='2' * 40)
    converted = merge_item_for(QueueItem(ref))
    assert (converted.number, converted.branch, converted.newrev) == (None, 'master', '2' * 40)
    assert not converted.is_change


# -- where repos come from ---------------------------------------------------------
def test_plain_base_directory_or_url(tmp_path):
    (tmp_path / 'org').mkdir()
    (tmp_path / 'org' / 'bare.git').mkdir()
    resolver = RepoUrlResolver({'local': str(tmp_path), 'web': 'https://git.example.org/',
                                'scp': 'git@example.org:'})
    assert resolver.url('local', 'org/repo') == str(tmp_path / 'org' / 'repo')
    assert resolver.url('local', 'org/bare') == str(tmp_path / 'org' / 'bare.git')
    assert resolver.url('web', 'org/repo') == 'https://git.example.org/org/repo'
    assert resolver.url('scp', 'org/repo') == 'git@example.org:org/repo'


def test_gerrit_over_ssh_uses_the_connection_key():
    resolver = RepoUrlResolver({'gerrit': {'driver': 'gerrit', 'options': {
        'server': 'review.example.org', 'user': 'ci', 'sshkey': '/keys/id',
        'known_hosts': '/keys/known', 'baseurl': 'https://review.example.org/r'}}})
    remote = resolver.remote('gerrit', 'org/a')
    assert remote.url == 'ssh://ci@review.example.org:29418/org/a'
    ssh = shlex.split(remote.env['GIT_SSH_COMMAND'])
    assert ssh[0] == 'ssh' and ['-i', '/keys/id'] == ssh[ssh.index('-i'):ssh.index('-i') + 2]
    assert 'UserKnownHostsFile=/keys/known' in ssh and 'BatchMode=yes' in ssh
    # A host that never answers cannot hold a merge for ever.
    assert 'ConnectTimeout=30' in ssh and 'ServerAliveInterval=60' in ssh


def test_gerrit_keepalive_zero_turns_keepalives_off():
    resolver = RepoUrlResolver({'gerrit': {'driver': 'gerrit', 'options': {
        'server': 'review.example.org', 'keepalive': '0'}}})
    ssh = shlex.split(resolver.remote('gerrit', 'org/a').env['GIT_SSH_COMMAND'])
    assert not any(o.startswith('ServerAliveInterval') for o in ssh)


def test_gerrit_over_http_keeps_credentials_out_of_the_url():
    options = {'server': 'review.example.org', 'user': 'ci', 'password': 's3cret',
               'baseurl': 'https://review.example.org/r', 'port': '29419'}
    remote = RepoUrlResolver({'g': {'driver': 'gerrit', 'options': options}}).remote('g', 'o/a')
    assert remote.url == 'https://review.example.org/r/a/o/a'
    assert 's3cret' not in remote.url
    header = remote.env['GIT_CONFIG_VALUE_0']
    assert remote.env['GIT_CONFIG_KEY_0'] == 'http.extraHeader'
    assert base64.b64decode(header.split()[-1]) == b'ci:s3cret'
    # git_over_ssh forces SSH even with a password.
    options['git_over_ssh'] = 'true'
    remote = RepoUrlResolver({'g': {'driver': 'gerrit', 'options': options}}).remote('g', 'o/a')
    assert remote.url == 'ssh://ci@review.example.org:29419/o/a'
    # Anonymous HTTP: git_over_ssh=false with a baseurl.
    anon = {'server': 'review.example.org', 'git_over_ssh': 'false',
            'baseurl': 'https://review.example.org/'}
    remote = RepoUrlResolver({'g': {'driver': 'gerrit', 'options': anon}}).remote('g', 'o/a')
    assert (remote.url, remote.env) == ('https://review.example.org/o/a', {})


def test_git_driver_and_unknown_connections():
    resolver = RepoUrlResolver({'opendev': {'driver': 'git', 'options': {
        'baseurl': 'https://opendev.org'}}, 'odd': {'driver': 'smtp', 'options': {}}})
    assert resolver.url('opendev', 'zuul/zuul-jobs') == 'https://opendev.org/zuul/zuul-jobs'
    with pytest.raises(UnknownConnectionError):
        resolver.url('odd', 'x')
    with pytest.raises(UnknownConnectionError):
        resolver.url('nowhere', 'x')


@pytest.mark.parametrize('name', ['', '/abs', '../up', 'org/../x', 'org//x', 'org/.'])
def test_project_names_cannot_leave_the_cache(name):
    with pytest.raises(ValueError):
        check_project_name(name)


def test_fetched_change_refs_are_namespaced():
    assert fetched_ref('refs/changes/01/1/1') == 'refs/zuul/fetched/changes/01/1/1'
