"""Executor pieces without nodes: wire format, inventory rules, variables,
role paths, plugin refusal, capacity, live-log following."""

from __future__ import annotations

import json
import os
import threading

import pytest

from zuul.ansible.restrict import short_name
from zuul.executor import inventory, playbooks
from zuul.executor.capacity import CapacityGovernor
from zuul.executor.jobdir import JobDir
from zuul.executor.logstream import LogStreamServer, follow
from zuul.executor.protocol import (
    BuildResult,
    ExecuteRequest,
    GroupSpec,
    ItemSpec,
    JobSpec,
    NodeSpec,
    PlaybookSpec,
    ProtocolVersionError,
    RoleSpec,
    ZuulContext,
    stop_function,
)
from zuul.executor.vars import zuul_vars


def make_request(**job_kw) -> ExecuteRequest:
    job = JobSpec(name='j', run=[PlaybookSpec('gerrit', 'org/p', 'master', 'run.yaml',
                                              roles=[RoleSpec('gerrit', 'org/roles', 'r')])],
                  **job_kw)
    node = NodeSpec(name=['controller'], label='l', interface_ip='10.0.0.1',
                    connection_port=2022, host_keys=['ssh-ed25519 AAAA'])
    return ExecuteRequest(uuid='u1', job=job, nodes=[node],
                          items=[ItemSpec('gerrit', 'org/p', 'review.example.org', 'master',
                                          'refs/changes/01/1/2', 1, 2)],
                          zuul=ZuulContext('t', 'gate', 'bs',
                                           canonical_hostnames={'gerrit': 'review.example.org'}))


def test_execute_request_round_trips_and_checks_version():
    request = make_request(vars={'a': 1})
    again = ExecuteRequest.from_json(request.to_json())
    assert again == request
    assert again.job.run[0].roles[0].target_name == 'r'
    data = request.to_dict()
    data['version'] = 99
    with pytest.raises(ProtocolVersionError):
        ExecuteRequest.from_json(__import__('json').dumps(data))
    assert stop_function('ex1') == 'executor:stop:ex1'


def test_build_result_exposes_artifacts_and_child_jobs():
    result = BuildResult('SUCCESS', data={'zuul': {'artifacts': [{'name': 'a'}],
                                                   'child_jobs': ['c']}})
    again = BuildResult.from_json(result.to_json())
    assert again.artifacts == [{'name': 'a'}] and again.child_jobs == ['c']
    assert BuildResult('SUCCESS').child_jobs is None


@pytest.mark.parametrize('name', ['localhost', 'LOCALHOST', '127.0.0.1', '::1'])
def test_localhost_node_names_refused(name):
    request = make_request()
    request.nodes[0].name = [name]
    with pytest.raises(inventory.InventoryError):
        inventory.check_job(request.job, request.nodes)


def test_connection_variables_refused_and_others_accepted():
    request = make_request(vars={'foo': 1, 'ansible_python_interpreter': 'x'})
    inventory.check_job(request.job, request.nodes)  # accepted
    for field, value in [('vars', {'ansible_connection': 'local'}),
                         ('extra_vars', {'ansible_ssh_common_args': '-o ProxyCommand=x'}),
                         ('host_vars', {'controller': {'ansible_host': '127.0.0.1'}}),
                         ('group_vars', {'g': {'ansible_port': 1}})]:
        bad = make_request(**{field: value})
        with pytest.raises(inventory.InventoryError):
            inventory.check_job(bad.job, bad.nodes)


def test_inventory_and_known_hosts():
    request = make_request(host_vars={'controller': {'hv': 1}},
                           groups=[GroupSpec('g', ['controller', 'missing'])],
                           group_vars={'g': {'gv': 2}})
    inv = inventory.build_inventory(request.job, request.nodes, {'v': 3})
    host = inv['all']['hosts']['controller']
    assert (host['ansible_host'], host['ansible_port'], host['hv']) == ('10.0.0.1', 2022, 1)
    assert host['nodepool']['label'] == 'l'
    assert inv['all']['children']['g'] == {'hosts': {'controller': None}, 'vars': {'gv': 2}}
    assert inventory.known_hosts_lines(request.nodes) == ['[10.0.0.1]:2022 ssh-ed25519 AAAA']


def test_zuul_vars_use_released_names(tmp_path):
    request = make_request()
    jobdir = JobDir(str(tmp_path), 'u1')
    data = zuul_vars(request, jobdir, 'ex1', {('gerrit', 'org/p'): 'master'})
    assert data['project'] == {
        'name': 'org/p', 'short_name': 'p', 'canonical_hostname': 'review.example.org',
        'canonical_name': 'review.example.org/org/p',
        'src_dir': 'src/review.example.org/org/p'}
    assert (data['change'], data['patchset'], data['branch']) == ('1', '2', 'master')
    assert data['projects']['review.example.org/org/p']['checkout'] == 'master'
    assert set(data['executor']) >= {'hostname', 'src_root', 'log_root', 'work_root',
                                     'inventory_file'}
    assert data['items'][0]['change'] == '1'
    assert (data['build'], data['buildset'], data['tenant'], data['pipeline']) == (
        'u1', 'bs', 't', 'gate')


def _mkdirs(root, *paths):
    for p in paths:
        os.makedirs(os.path.join(root, p), exist_ok=True)


def test_role_path_rules(tmp_path):
    bare, multi, flat = (str(tmp_path / n) for n in ('bare', 'multi', 'flat'))
    _mkdirs(bare, 'tasks')
    _mkdirs(multi, 'roles/a/tasks')
    _mkdirs(flat, 'a/tasks')
    links = str(tmp_path / 'links')
    assert playbooks.role_search_path(bare, 'puppet', links) == links
    assert os.path.realpath(os.path.join(links, 'puppet')) == os.path.realpath(bare)
    assert playbooks.role_search_path(multi, 'x', links) == os.path.join(multi, 'roles')
    assert playbooks.role_search_path(flat, 'x', links) == flat
    assert playbooks.default_role_name('org/ansible-role-puppet') == 'puppet'


def test_plugin_dirs_refused_and_playbook_lookup(tmp_path):
    root = str(tmp_path)
    _mkdirs(root, 'playbooks')
    (tmp_path / 'playbooks' / 'run.yaml').write_text('[]')
    assert playbooks.find_playbook(root, 'playbooks/run').endswith('run.yaml')
    with pytest.raises(playbooks.PlaybookError):
        playbooks.find_playbook(root, '../../etc/passwd')
    playbooks.check_no_plugins(os.path.join(root, 'playbooks'), 'p')  # accepted
    _mkdirs(root, 'playbooks/filter_plugins')
    with pytest.raises(playbooks.PlaybookError):
        playbooks.check_no_plugins(os.path.join(root, 'playbooks'), 'p')


def test_short_names():
    assert short_name('ansible.builtin.shell') == 'shell'
    assert short_name('ansible.legacy.local') == 'local'
    assert short_name('community.general.x') == 'community.general.x'


def test_capacity_governor():
    gov = CapacityGovernor(max_builds=2, load_multiplier=2.0, min_avail_mem=10.0, cpu_count=2)
    gov.loadavg = lambda: (1.0, 0, 0)
    gov.meminfo = lambda: (500, 1000)
    assert gov.accepting(1)
    assert not gov.accepting(2) and 'job limit' in gov.reason
    gov.loadavg = lambda: (4.5, 0, 0)
    assert not gov.accepting(0) and 'load' in gov.reason
    gov.loadavg = lambda: (1.0, 0, 0)
    gov.meminfo = lambda: (50, 1000)
    assert not gov.accepting(0) and 'memory' in gov.reason


def test_log_follow_streams_growth_until_finished(tmp_path):
    server = LogStreamServer('127.0.0.1', 0)
    path = str(tmp_path / 'job-output.txt')
    server.register('b1', path)
    stream = server.get('b1')
    chunks = []
    got_first = threading.Event()

    def write(data):
        chunks.append(data)
        got_first.set()
    reader = threading.Thread(target=follow, args=(stream, write))
    reader.start()
    with open(path, 'w') as f:
        f.write('line 1\n')
    assert got_first.wait(10)
    with open(path, 'a') as f:
        f.write('line 2\n')
    server.finish('b1')
    reader.join(10)
    assert b''.join(chunks) == b'line 1\nline 2\n'
    assert server.get('b1') is None
    server._httpd.server_close()


def test_unsafe_strings_survive_the_wire_and_reach_ansible_tagged(tmp_path):
    from zuul.executor.build import _write_vars
    from zuul.lib import yamlutil
    data = yamlutil.load("x: !unsafe '{{ lookup(\"pipe\", \"id\") }}'\ny: plain\n"
                         "n: !unsafe '0123'\n")
    wire = json.loads(json.dumps(yamlutil.to_wire(data)))
    assert wire == {'x': {'__ansible_unsafe__': '{{ lookup("pipe", "id") }}'}, 'y': 'plain',
                    'n': {'__ansible_unsafe__': '0123'}}
    path = tmp_path / 'vars.yaml'
    _write_vars(str(path), wire)
    # Ansible's JSON decoder makes {"__ansible_unsafe": text} unsafe text (and
    # keeps "0123" a string, which a YAML !unsafe tag did not in 2.19).
    assert json.loads(path.read_text()) == {
        'x': {'__ansible_unsafe': '{{ lookup("pipe", "id") }}'}, 'y': 'plain',
        'n': {'__ansible_unsafe': '0123'}}


def test_node_records_reach_the_inventory_with_cloud_and_host_id():
    from zuul.executor import inventory
    from zuul.scheduler.builds import node_specs
    record = {'id': '0000000007', 'type': 'ubuntu', 'provider': 'cloud-a', 'region': 'r1',
              'az': 'nova', 'cloud': 'opendev', 'host_id': 'hyp-42',
              'interface_ip': '203.0.113.9', 'public_ipv4': '203.0.113.9',
              'connection_port': 2222, 'username': 'zuul', 'host_keys': ['ssh-ed25519 AAA']}
    (spec,) = node_specs([(['controller'], record)])
    assert (spec.cloud, spec.host_id, spec.connection_port) == ('opendev', 'hyp-42', 2222)
    variables = inventory.nodepool_vars(spec)
    assert (variables['cloud'], variables['host_id'], variables['az']) == \
        ('opendev', 'hyp-42', 'nova')


def test_workspace_scheme_src_dirs_and_unknown_scheme():
    from zuul.executor.workspace import WorkspaceError, src_dir
    assert src_dir('golang', 'h.org', 'org/p') == 'src/h.org/org/p'
    assert src_dir('flat', 'h.org', 'org/sub/p') == 'src/p'
    assert src_dir('unique', 'h.org', 'org/sub/p') == 'src/h.org/org/org%2Fsub%2Fp'
    assert src_dir('unique', 'h.org', 'p') == 'src/h.org/p/p'
    with pytest.raises(WorkspaceError, match='workspace-scheme'):
        src_dir('nested', 'h.org', 'org/p')
    request = make_request(workspace_scheme='flat')
    data = zuul_vars(request, JobDir('/tmp/jd', 'u1'), 'ex', {('gerrit', 'org/p'): 'master'})
    assert data['project']['src_dir'] == 'src/p'
    assert data['projects']['review.example.org/org/p']['src_dir'] == 'src/p'


def test_default_username_for_nodes_naming_none():
    request = make_request()
    request.nodes[0].username = None
    inv = inventory.build_inventory(request.job, request.nodes, {}, default_username='ci')
    assert inv['all']['hosts']['controller']['ansible_user'] == 'ci'
    request.nodes[0].username = 'root'
    inv = inventory.build_inventory(request.job, request.nodes, {}, default_username='ci')
    assert inv['all']['hosts']['controller']['ansible_user'] == 'root'


@pytest.mark.parametrize('text,words', [
    ('- a\n', ['mapping']),
    ('ansible_connection: local\n', ['ansible_connection']),
    ('zuul: {}\n', ['zuul']),
    ('a: [\n', ['cannot load']),
])
def test_site_variables_file_refused_clearly(tmp_path, text, words):
    from zuul.executor.settings import load_site_variables
    path = tmp_path / 'site.yaml'
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_site_variables(str(path))
    assert str(path) in str(info.value) and all(w in str(info.value) for w in words)
    with pytest.raises(ValueError, match='cannot load'):
        load_site_variables(str(tmp_path / 'missing.yaml'))


@pytest.mark.parametrize('cpus,multiplier,configured,limit', [
    (2, 2.5, None, 10),     # four CPUs or fewer: twice load_multiplier x CPUs
    (8, 2.5, None, 20),     # more: load_multiplier x CPUs
    (8, 2.5, 3, 3),         # max_starting_builds wins
    (2, 0, None, None),     # governor off: no limit unless configured
])
def test_starting_builds_limit(cpus, multiplier, configured, limit):
    gov = CapacityGovernor(max_builds=100, load_multiplier=multiplier, min_avail_mem=0,
                           max_starting_builds=configured, cpu_count=cpus)
    gov.loadavg = lambda: (0.0, 0, 0)
    assert gov.starting_limit() == limit
    if limit is not None:
        assert gov.accepting(5, limit - 1)
        assert not gov.accepting(5, limit) and f'max_starting_builds {limit}' in gov.reason


def test_job_dir_usage_counts_blocks_and_only_links_of_its_own(tmp_path):
    from zuul.executor.diskusage import MB, job_dir_usage
    job, cache = tmp_path / 'job', tmp_path / 'cache'
    (job / 'work').mkdir(parents=True)
    cache.mkdir()
    base = job_dir_usage(str(job))
    (job / 'work' / 'data').write_bytes(os.urandom(2 * MB))
    assert 2 * MB <= job_dir_usage(str(job)) - base < 2 * MB + 64 * 1024
    # Linked twice inside the job dir: counted once, not hidden.
    os.link(job / 'work' / 'data', job / 'work' / 'again')
    assert 2 * MB <= job_dir_usage(str(job)) - base < 2 * MB + 64 * 1024
    # Linked from the cache (as checkouts link git objects): not the job's.
    (cache / 'object').write_bytes(os.urandom(3 * MB))
    os.link(cache / 'object', job / 'work' / 'object')
    assert job_dir_usage(str(job)) - base < 2 * MB + 64 * 1024
    # A sparse file takes no blocks.
    with open(job / 'work' / 'sparse', 'wb') as f:
        f.truncate(100 * MB)
    assert job_dir_usage(str(job)) - base < 2 * MB + 64 * 1024


def test_disk_and_starting_settings_parsed_and_checked():
    import configparser

    from zuul.executor.settings import ExecutorSettings

    def load(**keys):
        config = configparser.ConfigParser()
        config.read_dict({'executor': keys})
        return ExecutorSettings.from_config(config)

    defaults = load()
    assert (defaults.disk_limit_per_job, defaults.max_starting_builds) == (250, None)
    settings = load(disk_limit_per_job='5000', max_starting_builds='4')
    assert (settings.disk_limit_per_job, settings.max_starting_builds) == (5000, 4)
    with pytest.raises(ValueError, match=r"disk_limit_per_job: '1G' is not an integer"):
        load(disk_limit_per_job='1G')
    with pytest.raises(ValueError, match='max_starting_builds must be at least 1'):
        load(max_starting_builds='0')


def test_trusted_homes_carry_the_nodes_host_keys_and_ansible_sees_its_own_collections(
        tmp_path):
    """zuul-jobs' roles need both: ``synchronize`` runs rsync over a plain
    ssh that reads ~/.ssh/known_hosts (released Zuul's HOME holds the
    build's), and its modules come from the collections installed with
    the Ansible that runs (never from a user's or the system's
    collection directories)."""
    from zuul.executor.ansiblecfg import render_config
    from zuul.executor.jobdir import JobDir
    jobdir = JobDir(str(tmp_path), 'b' * 32)
    jobdir.create()
    with open(jobdir.known_hosts, 'w') as f:
        f.write('10.0.0.1 ssh-ed25519 AAAAC3Nza\n')
    home = jobdir.playbook_home('pre_run', 0)
    with open(os.path.join(home, '.ssh', 'known_hosts')) as f:
        assert f.read() == '10.0.0.1 ssh-ed25519 AAAAC3Nza\n'
    assert os.stat(os.path.join(home, '.ssh')).st_mode & 0o777 == 0o700
    config = render_config(jobdir, trusted=True)
    assert f'collections_path = {jobdir.no_plugins}\n' in config
    assert 'collections_scan_sys_path = True\n' in config
