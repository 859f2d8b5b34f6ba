"""A stand-in scheduler that answers the ``zuul:*`` RPC functions with
canned data over a REAL Gearman server (the production RPCListener and
RPCClient run unmodified), for testing zuul-web and the zuul CLI without
a scheduler.

Two tenants: ``tenant-one`` (a gate with a shared queue of three changes,
one running job, a check pipeline) and ``tenant-two`` (one project, no
items), so tests can check that one tenant never shows another's data.
"""

from __future__ import annotations

import copy
import re
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from zuul.configloader.launcher_objects import object_summaries
from zuul.lib import rpc_protocol as p
from zuul.lib.rpc import RPCClient, RPCListener
from zuul.model.layout import Layout

_CHANGE_RE = re.compile(r'^(\d+),(\d+)$')
# Key generation is slow; one key per project for the whole test session.
_KEYS: dict[str, rsa.RSAPrivateKey] = {}

RUNNING_UUID = '5f0c7e2a9b6d4c1e8a3f2b7d6e5c4a39'
FINISHED_UUID = '0a1b2c3d4e5f40718293a4b5c6d7e8f9'


def project_key(project: str) -> rsa.RSAPrivateKey:
    if project not in _KEYS:
        _KEYS[project] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return _KEYS[project]


def _sc(project, path, line=1):
    return {'project': project, 'branch': 'master', 'path': path}, line


def _variant(name, parent, project='common-config', path='zuul.d/jobs.yaml', line=1,
             branches=(), **extra):
    sc, _ = _sc(project, path, line)
    variant = {'name': name, 'parent': parent, 'description': f'The {name} job.',
               'branches': list(branches), 'source_context': sc, 'abstract': False,
               'final': False, 'protected': False, 'voting': True, 'timeout': 1800,
               'attempts': 3, 'run': [f'playbooks/{name}.yaml'], 'pre_run': [],
               'post_run': [], 'dependencies': [], 'required_projects': [],
               'variables': {}, 'secrets': [], 'tags': []}
    variant.update(extra)
    return variant


def _job(name, result=None, uuid=None, url=None, started=None, estimated=None, voting=True):
    now_ms = int(time.time() * 1000)
    start = now_ms - started * 1000 if started is not None else None
    return {'name': name, 'uuid': uuid, 'url': url, 'report_url': None, 'result': result,
            'voting': voting, 'start_time': start,
            'end_time': now_ms if result else None,
            'elapsed_time': started * 1000 if started is not None else None,
            'remaining_time': (None if started is None else 0 if result else
                               max(estimated - started, 0) * 1000 if estimated else None),
            'estimated_time': estimated, 'canceled': False,
            'waiting_status': None if started is not None else 'node request',
            'tries': 1, 'dependencies': []}


def _item(change_id, project, ahead, behind, jobs, age, live=True):
    remaining = [j['remaining_time'] for j in jobs if j['remaining_time'] is not None]
    return {'id': change_id, 'item_id': f'item-{change_id}', 'event_id': f'ev-{change_id}',
            'project': project, 'connection': 'gerrit',
            'ref': f'refs/changes/{change_id.split(",")[0][-2:]:0>2}/'
                   f'{change_id.split(",")[0]}/{change_id.split(",")[1]}',
            'branch': 'master', 'url': f'https://review.example.com/{change_id.split(",")[0]}',
            'owner': None, 'subject': f'Change {change_id}', 'live': live, 'active': True,
            'enqueue_time': int((time.time() - age) * 1000), 'item_ahead': ahead,
            'items_behind': behind, 'failing_reasons': [], 'zuul_ref': f'Z{change_id}',
            'remaining_time': max(remaining) if remaining else None, 'jobs': jobs}


def tenant_one_status(stream_url: str | None) -> dict:
    gate_jobs = lambda: [_job('project-merge', 'SUCCESS', FINISHED_UUID, None, 30, 40),  # noqa
                         _job('project-test1')]
    first = [_job('project-merge', 'SUCCESS', FINISHED_UUID, None, 30, 40),
             _job('project-test1', None, RUNNING_UUID, stream_url, 60, 120)]
    gate = [_item('1,2', 'org/project', None, ['2,1'], first, 300),
            _item('2,1', 'org/project', '1,2', ['4,1'], gate_jobs(), 200),
            _item('4,1', 'org/project1', '2,1', [], gate_jobs(), 100)]
    check = [_item('3,1', 'org/project', None, [], [_job('project-test1')], 50)]
    return {
        'zuul_version': 'fake', 'tenant': 'tenant-one', 'last_reconfigured': 0,
        'pipelines': [
            {'name': 'check', 'description': 'Newly uploaded patchsets.',
             'manager': 'independent',
             'change_queues': [{'name': 'org/project', 'window': None, 'heads': [check]}]},
            {'name': 'gate', 'description': 'Changes approved for merge.',
             'manager': 'dependent',
             'change_queues': [{'name': 'integrated', 'window': 20, 'heads': [gate]}]},
            {'name': 'post', 'description': '', 'manager': 'supercedent',
             'change_queues': []},
        ],
        'trigger_event_queue': {'length': 0}, 'management_event_queue': {'length': 0},
        'result_event_queue': {'length': 0},
    }


def _empty_status(tenant, pipelines):
    return {'zuul_version': 'fake', 'tenant': tenant, 'last_reconfigured': 0,
            'pipelines': [{'name': n, 'description': '', 'manager': 'independent',
                           'change_queues': []} for n in pipelines],
            'trigger_event_queue': {'length': 0}, 'management_event_queue': {'length': 0},
            'result_event_queue': {'length': 0}}


def canned_tenants(stream_url: str | None = None) -> dict:
    return {
        'tenant-one': {
            'projects': {'common-config': 'config', 'org/project': 'untrusted',
                         'org/project1': 'untrusted'},
            'pipelines': ['check', 'gate', 'post'],
            'changes': {'org/project': {1: 2, 2: 1, 3: 1}, 'org/project1': {4: 1}},
            'jobs': {
                'base': [_variant('base', None, run=[], line=1)],
                'project-merge': [_variant('project-merge', 'base', line=10)],
                'project-test1': [
                    _variant('project-test1', 'base', line=20),
                    _variant('project-test1', 'base', line=30, branches=['stable/.*'],
                             timeout=600)],
            },
            'config_errors': [{'source_context': _sc('org/project1', '.zuul.yaml')[0],
                               'line': 3, 'error': 'Job project-test9 not defined',
                               'short_error': 'Job project-test9 not defined'}],
            'status': tenant_one_status(stream_url),
        },
        'tenant-two': {
            'projects': {'common-config-two': 'config', 'org/project2': 'untrusted'},
            'pipelines': ['check'],
            'changes': {'org/project2': {10: 1}},
            'jobs': {'base': [_variant('base', None, 'common-config-two', run=[])],
                     'secret-job': [_variant('secret-job', 'base', 'common-config-two',
                                             line=5)]},
            'config_errors': [],
            'status': _empty_status('tenant-two', ['check']),
        },
    }


LAUNCHER_CONFIG = """
- image: {name: debian, type: cloud, description: Stock Debian}
- flavor: {name: small}
- label: {name: debian-small, image: debian, flavor: small, min-ready: 2}
- section:
    name: cloud-one
    connection: cloud
    key-name: secret-ish-key-name
    images: [{name: debian, image-name: debian-12-genericcloud}]
    flavors: [{name: small, flavor-name: m1.small}]
- provider:
    name: cloud-one-main
    section: cloud-one
    labels: [debian-small]
"""
_LAUNCHER_LAYOUTS: dict = {}


def launcher_layouts() -> dict:
    """tenant -> Layout with seed 001's objects (tenant-one only)."""
    if not _LAUNCHER_LAYOUTS:
        from zuul.configloader.layout import ConfigFile, LayoutLoader
        from zuul.model.tenant import Tenant, TenantProject
        project = TenantProject('gerrit', 'common-config', trusted=True)
        loader = LayoutLoader(connections={'gerrit': 'gerrit', 'cloud': 'openstack'},
                              canonical_hostnames={'gerrit': 'review.example.com'})
        _LAUNCHER_LAYOUTS['tenant-one'] = loader.load(
            Tenant('tenant-one', [project]),
            [ConfigFile('zuul.d/nodes.yaml', LAUNCHER_CONFIG, project, 'master')])
    return _LAUNCHER_LAYOUTS


class FakeSchedulerRPC:
    """Serves every ``zuul:*`` function from ``self.tenants``; records each
    request in ``self.calls`` as ``(function, RPCRequest)``."""

    def __init__(self, host: str, port: int, stream_url: str | None = None):
        self.tenants = canned_tenants(stream_url)
        self.calls: list[tuple[str, p.RPCRequest]] = []
        self.autoholds: list[dict] = []
        handlers = {name: self._recorder(name, getattr(self, '_' + name.split(':', 1)[1]))
                    for name in p.ALL_FUNCTIONS}
        self.listener = RPCListener(host, port, handlers, name='fake-scheduler')

    def start(self):
        self.listener.start()

    def stop(self):
        self.listener.stop()

    def set_stream_url(self, url: str | None) -> None:
        """Point the running build (RUNNING_UUID) at a live-log URL."""
        for pl in self.tenants['tenant-one']['status']['pipelines']:
            for q in pl['change_queues']:
                for job in (j for head in q['heads'] for i in head for j in i['jobs']):
                    if job['uuid'] == RUNNING_UUID:
                        job['url'] = url

    def _recorder(self, name, handler):
        def handle(request):
            self.calls.append((name, request))
            return handler(request)
        return handle

    # -- lookups that raise the documented errors --------------------------------

    def _tenant(self, request):
        if request.tenant not in self.tenants:
            raise p.RPCError(f'Unknown tenant {request.tenant}')
        return self.tenants[request.tenant]

    def _pipeline(self, tenant, request):
        if request.pipeline not in tenant['pipelines']:
            raise p.RPCError(f'Unknown pipeline {request.pipeline} in tenant {request.tenant}')

    def _project(self, tenant, request) -> str:
        name = request.project or ''
        short = name.split('/', 1)[1] if name.startswith('review.example.com/') else name
        if short not in tenant['projects']:
            raise p.RPCError(f'Unknown project {name} in tenant {request.tenant}')
        return short

    def _change(self, tenant, project, change):
        match = _CHANGE_RE.match(change or '')
        if not match:
            raise p.RPCError(f'Malformed change "{change}": expected NUMBER,PATCHSET')
        number, patchset = int(match.group(1)), int(match.group(2))
        latest = tenant['changes'].get(project, {}).get(number)
        if latest is None or patchset > latest:
            raise p.RPCError(f'Change {change} not found in project {project}')

    # -- handlers ----------------------------------------------------------------------

    def _tenant_list(self, request):
        out = []
        for name, t in sorted(self.tenants.items()):
            queued = sum(len(head) for pl in t['status']['pipelines']
                         for q in pl['change_queues'] for head in q['heads'])
            out.append({'name': name, 'projects': len(t['projects']), 'queue': queued})
        return out

    def _status_get(self, request):
        return self._tenant(request)['status']

    def _enqueue(self, request):
        t = self._tenant(request)
        self._pipeline(t, request)
        project = self._project(t, request)
        self._change(t, project, request.change)
        return {'tenant': request.tenant, 'pipeline': request.pipeline,
                'project': project, 'change': request.change}

    def _enqueue_ref(self, request):
        t = self._tenant(request)
        self._pipeline(t, request)
        project = self._project(t, request)
        if not (request.ref or '').startswith('refs/'):
            raise p.RPCError(f'Malformed ref "{request.ref}": expected refs/...')
        return {'tenant': request.tenant, 'pipeline': request.pipeline,
                'project': project, 'ref': request.ref}

    def _dequeue(self, request):
        t = self._tenant(request)
        self._pipeline(t, request)
        project = self._project(t, request)
        if request.change:
            self._change(t, project, request.change)
        target = request.change or request.ref
        queued = [i['id'] for pl in t['status']['pipelines'] if pl['name'] == request.pipeline
                  for q in pl['change_queues'] for head in q['heads'] for i in head]
        if target not in queued:
            raise p.RPCError(f'Change {target} not found in pipeline {request.pipeline}')
        return {'tenant': request.tenant, 'pipeline': request.pipeline, 'project': project,
                'dequeued': target}

    def _promote(self, request):
        t = self._tenant(request)
        self._pipeline(t, request)
        queued = {i['id'] for pl in t['status']['pipelines'] if pl['name'] == request.pipeline
                  for q in pl['change_queues'] for head in q['heads'] for i in head}
        for change in request.changes:
            if not _CHANGE_RE.match(change):
                raise p.RPCError(f'Malformed change "{change}": expected NUMBER,PATCHSET')
            if change not in queued:
                raise p.RPCError(f'Change {change} not found in pipeline {request.pipeline}')
        return {'tenant': request.tenant, 'pipeline': request.pipeline,
                'promoted': list(request.changes)}

    def _autohold(self, request):
        t = self._tenant(request)
        project = self._project(t, request)
        if request.job not in t['jobs']:
            raise p.RPCError(f'Unknown job {request.job} in tenant {request.tenant}')
        ref_filter = request.ref or '.*'
        if request.change:
            self._change(t, project, request.change)
            number, _ = request.change.split(',')
            ref_filter = f'refs/changes/{number[-2:]:0>2}/{number}/.*'
        hold = {'id': f'{len(self.autoholds) + 1:010d}', 'tenant': request.tenant,
                'project': project, 'job': request.job, 'ref_filter': ref_filter,
                'reason': request.reason, 'max_count': request.count, 'current_count': 0,
                'node_hold_expiration': request.node_hold_expiration, 'nodes': []}
        self.autoholds.append(hold)
        return {k: hold[k] for k in ('id', 'tenant', 'project', 'job', 'ref_filter')} | {
            'count': request.count}

    def _autohold_list(self, request):
        self._tenant(request)
        return [h for h in self.autoholds if h['tenant'] == request.tenant]

    def _key_get(self, request):
        t = self._tenant(request)
        project = self._project(t, request)
        return project_key(project).public_key().public_bytes(
            serialization.Encoding.PEM,
            serialization.PublicFormat.SubjectPublicKeyInfo).decode()

    def _job_list(self, request):
        t = self._tenant(request)
        return [{'name': name, 'description': variants[0]['description'], 'tags': [],
                 'variants': [{'parent': v['parent'], 'branches': v['branches'],
                               'source_context': v['source_context']} for v in variants]}
                for name, variants in sorted(t['jobs'].items())]

    def _job_get(self, request):
        t = self._tenant(request)
        if request.job not in t['jobs']:
            raise p.RPCError(f'Unknown job {request.job} in tenant {request.tenant}')
        if not request.project:
            return t['jobs'][request.job]
        project = self._project(t, request)
        if request.pipeline:
            self._pipeline(t, request)
        return self._freeze(t, request.job, project, request.branch or 'master',
                            request.pipeline)

    @staticmethod
    def _freeze(tenant, job, project, branch, pipeline):
        chain, name = [], job
        while name:
            variants = [v for v in tenant['jobs'][name]
                        if not v['branches'] or any(re.match(b, branch) for b in v['branches'])]
            chain = variants + chain
            name = variants[0]['parent'] if variants else None
        frozen = {}
        for v in chain:
            frozen.update(copy.deepcopy(v))
        frozen['name'] = job
        path = [f'{v["name"]} ({v["source_context"]["project"]}/'
                f'{v["source_context"]["path"]}@{v["source_context"]["branch"]})'
                for v in chain]
        return {'job': job, 'project': project, 'branch': branch, 'pipeline': pipeline,
                'inheritance_path': path, 'frozen': frozen}

    def _project_list(self, request):
        t = self._tenant(request)
        return [{'name': n, 'canonical_name': f'review.example.com/{n}',
                 'connection_name': 'gerrit', 'type': kind}
                for n, kind in sorted(t['projects'].items())]

    def _project_get(self, request):
        t = self._tenant(request)
        name = self._project(t, request)
        jobs = [t['jobs'][j] for j in ('project-merge', 'project-test1') if j in t['jobs']]
        return {'name': name, 'canonical_name': f'review.example.com/{name}',
                'connection_name': 'gerrit', 'type': t['projects'][name],
                'configs': [{'source_context': _sc(name, '.zuul.yaml')[0], 'templates': [],
                             'default_branch': 'master', 'merge_mode': 'merge-resolve',
                             'pipelines': [{'name': pl, 'queue_name': 'integrated'
                                            if pl == 'gate' else None, 'jobs': jobs}
                                           for pl in t['pipelines'] if pl != 'post']}]}

    def _config_errors_list(self, request):
        return self._tenant(request)['config_errors']

    # Seed 001's node and image objects: the production listing code over a
    # layout the real loader builds (LAUNCHER_CONFIG).
    def _launcher_layout(self, request):
        self._tenant(request)
        return launcher_layouts().get(request.tenant) or Layout(request.tenant)

    def _launcher_image_list(self, request):
        return object_summaries(self._launcher_layout(request), 'images')

    def _launcher_flavor_list(self, request):
        return object_summaries(self._launcher_layout(request), 'flavors')

    def _launcher_label_list(self, request):
        return object_summaries(self._launcher_layout(request), 'labels')

    def _launcher_provider_list(self, request):
        return object_summaries(self._launcher_layout(request), 'providers')

    # Image builds (seed 001): no images in the canned tenants.
    def _image_build(self, request):
        self._tenant(request)
        raise p.RPCError(f'Unknown zuul image "{request.image}" in tenant "{request.tenant}"')

    def _image_build_list(self, request):
        self._tenant(request)
        return []

    _image_upload_list = _image_build_list

    def _image_delete(self, request):
        self._tenant(request)
        raise p.RPCError(f'Unknown image build "{request.build}" in tenant '
                         f'"{request.tenant}"')

    def _reconfigure(self, request):
        if request.tenant:
            self._tenant(request)
            return {'reconfigured': [request.tenant]}
        return {'reconfigured': sorted(self.tenants)}


@pytest.fixture
def fake_scheduler(gearman_server):
    """A FakeSchedulerRPC on the test's Gearman server."""
    fake = FakeSchedulerRPC('127.0.0.1', gearman_server.port)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def rpc_client(gearman_server, fake_scheduler):
    """An RPCClient talking to the fake scheduler."""
    client = RPCClient('127.0.0.1', gearman_server.port, timeout=30)
    try:
        yield client
    finally:
        client.shutdown()


# -- build history and a running zuul-web for tests -------------------------------


def _history_item(project, number, patchset, results, start):
    from zuul.model import item as m
    from zuul.model.change import Change
    change = Change('gerrit', project, f'refs/changes/{number % 100:02d}/{number}/{patchset}',
                    number=number, patchset=patchset, branch_name='master',
                    url=f'https://review.example.com/{number}')
    item = m.QueueItem(change=change)
    bs = item.current_build_set
    bs.jobs = [m.JobRef(name) for name in results]
    for i, (name, result) in enumerate(results.items()):
        build = m.Build(bs.job(name), bs, result=result, start_time=start + i,
                        end_time=start + 60 + i, log_url=f'https://logs/{number}/{name}/')
        if result == 'FAILURE':
            build.result_data = {'zuul': {'artifacts': [
                {'name': 'test report', 'url': f'https://logs/{number}/{name}/report.html'}]}}
        bs.builds[name] = build
    return item


def fill_history(history) -> dict:
    """Record canned buildsets for both tenants; returns
    ``{(tenant, change, job): build uuid}``."""
    records = [
        ('tenant-one', 'check', 'org/project', 1, 1, {'project-merge': 'SUCCESS',
                                                     'project-test1': 'FAILURE'}, 'failure'),
        ('tenant-one', 'check', 'org/project', 1, 2, {'project-merge': 'SUCCESS',
                                                     'project-test1': 'SUCCESS'}, 'success'),
        ('tenant-one', 'gate', 'org/project1', 4, 1, {'project-merge': 'SUCCESS'}, 'success'),
        ('tenant-two', 'check', 'org/project2', 10, 1, {'secret-job': 'SUCCESS'}, 'success'),
    ]
    uuids = {}
    for n, (tenant, pipeline, project, number, ps, results, result) in enumerate(records):
        item = _history_item(project, number, ps, results, 1_700_000_000 + n * 1000)
        history.record_buildset(tenant, pipeline, item, result, f'Build {result}.')
        for name, build in item.current_build_set.builds.items():
            uuids[(tenant, f'{number},{ps}', name)] = build.uuid
        uuids[(tenant, f'{number},{ps}', None)] = item.current_build_set.uuid
    return uuids


@pytest.fixture
def build_history(tmp_path):
    from zuul.driver.sql.history import BuildHistory
    history = BuildHistory(f'sqlite:///{tmp_path}/history.db')
    history.migrate()
    history.uuids = fill_history(history)
    return history


@pytest.fixture
def zuul_web(rpc_client, build_history):
    """A started ZuulWeb on a free port, over the fake scheduler and a
    filled SQLite history; ``.base`` is its URL."""
    from zuul.web.server import ZuulWeb
    web = ZuulWeb('127.0.0.1', 0, rpc_client, build_history)
    web.start()
    web.base = f'http://127.0.0.1:{web.port}'
    try:
        yield web
    finally:
        web.stop()
