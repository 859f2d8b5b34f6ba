"""The input hash of result reuse (zuul/scheduler/reuse.py): equal for
identical inputs, different when any one input kind changes; the index of
successful builds and its build-history backing."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from tests.harness.waiting import wait_for
from zuul.driver.sql.history import BuildHistory
from zuul.executor.protocol import BuildResult, JobSpec, PlaybookSpec, RequiredProject, RoleSpec
from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler import reuse

APP = {'refs/heads/master': 'a' * 40, 'refs/heads/stable': 'b' * 40}
CONFIG = {'refs/heads/master': 'c' * 40}
LIB = {'refs/heads/master': 'd' * 40}


def _item(merged_app=APP, lib=LIB, config=CONFIG, branch='master', project='org/app'):
    change = Change('gerrit', project, 'refs/changes/01/1/1', number=1, patchset=1,
                    branch_name=branch)
    item = m.QueueItem(change=change)
    bs = item.current_build_set
    bs.repo_state = {'gerrit': {'org/project-config': dict(config), 'org/lib': dict(lib),
                                'org/app': {'refs/heads/master': 'f' * 40}}}
    bs.merged_state = {'gerrit': {project: dict(merged_app)}}
    return item


def _spec(**changes) -> JobSpec:
    spec = JobSpec(
        name='unit', timeout=600, vars={'a': 1},
        pre_run=[PlaybookSpec('gerrit', 'org/project-config', 'master', 'playbooks/pre',
                              trusted=True, secrets={'token': 's3cret'})],
        run=[PlaybookSpec('gerrit', 'org/app', 'master', 'playbooks/run',
                          roles=[RoleSpec('gerrit', 'org/lib')])],
        required_projects=[RequiredProject('gerrit', 'org/lib')])
    for key, value in changes.items():
        setattr(spec, key, value)
    return spec


def _job(nodes=(('controller', 'ubuntu'),)):
    return m.JobRef('unit', nodes=tuple(nodes))


def _hash(item=None, job=None, spec=None, artifacts=(), tenant='t1'):
    return reuse.input_hash(tenant, item or _item(), job or _job(), spec or _spec(),
                            list(artifacts))


def test_identical_inputs_give_the_same_hash():
    assert _hash() == _hash()
    assert len(_hash()) == 64


def _secret_spec():
    spec = _spec()
    spec.pre_run = [copy.deepcopy(spec.pre_run[0])]
    spec.pre_run[0].secrets = {'token': 'other'}
    return spec


@pytest.mark.parametrize('what,kwargs', [
    ('merged tree of the change', {'item': _item(merged_app={'refs/heads/master': 'e' * 40})}),
    ('another branch of the project', {'item': _item(
        merged_app={**APP, 'refs/heads/stable': '9' * 40})}),
    ('required project', {'item': _item(lib={'refs/heads/master': '1' * 40})}),
    ('playbook project', {'item': _item(config={'refs/heads/master': '2' * 40})}),
    ('item branch', {'item': _item(branch='stable')}),
    ('job vars', {'spec': _spec(vars={'a': 2})}),
    ('job timeout', {'spec': _spec(timeout=601)}),
    ('playbook path', {'spec': _spec(run=[PlaybookSpec('gerrit', 'org/app', 'master',
                                                       'playbooks/other')])}),
    ('secret value', {'spec': _secret_spec()}),
    ('nodeset label', {'job': _job(nodes=(('controller', 'centos'),))}),
    ('nodeset size', {'job': _job(nodes=(('a', 'ubuntu'), ('b', 'ubuntu')))}),
    ('parent artifacts', {'artifacts': [{'job': 'build', 'name': 'tarball',
                                         'url': 'http://logs/x.tgz'}]}),
    ('tenant', {'tenant': 't2'}),
])
def test_each_input_changed_alone_changes_the_hash(what, kwargs):
    assert _hash(**kwargs) != _hash(), what


def test_a_role_repository_is_an_input_of_its_own():
    """A role repo that is no required project nor a playbook's project:
    its branch heads are hashed through the role alone."""
    spec = _spec(run=[PlaybookSpec('gerrit', 'org/app', 'master', 'playbooks/run',
                                   roles=[RoleSpec('gerrit', 'org/roles')])])
    assert ('gerrit', 'org/roles') in reuse.used_projects(spec, _item())

    def with_roles(sha):
        item = _item()
        item.current_build_set.repo_state['gerrit']['org/roles'] = {
            'refs/heads/master': sha * 40}
        return reuse.input_hash('t1', item, _job(), spec, [])
    assert with_roles('7') is not None
    assert with_roles('7') != with_roles('8')


def test_secrets_are_hashed_as_a_digest_never_in_plaintext():
    material = reuse.job_material(_spec())
    text = repr(material)
    assert 's3cret' not in text
    assert len(material['pre_run'][0]['secrets']) == 64


def test_a_used_project_without_known_state_gives_no_hash():
    item = _item()
    del item.current_build_set.repo_state['gerrit']['org/lib']
    assert reuse.unpinned_projects(item.current_build_set,
                                   reuse.used_projects(_spec(), item)) == [('gerrit', 'org/lib')]
    assert _hash(item=item) is None
    # Pinned later (merger:refstate): describable again, same hash.
    item.current_build_set.pinned_state = {'gerrit': {'org/lib': dict(LIB)}}
    assert _hash(item=item) == _hash()


def test_projects_of_items_ahead_are_inputs():
    item = _item()
    ahead = m.QueueItem(change=Change('gerrit', 'org/other', 'refs/changes/02/2/1', number=2,
                                      patchset=1, branch_name='master'))
    item.current_build_set.dependent_items = (ahead,)
    assert ('gerrit', 'org/other') in reuse.used_projects(_spec(), item)
    assert _hash(item=item) is None   # its state is unknown: never reused


def test_reuse_is_off_unless_the_job_asks():
    assert not reuse.reuse_enabled(m.JobRef('j'))
    assert not reuse.reuse_enabled(m.JobRef('j', frozen={'reuse_results': False}))
    assert reuse.reuse_enabled(m.JobRef('j', frozen={'reuse_results': True}))


def _successful_build(digest='h' * 64):
    build = m.Build(_job(), _item().current_build_set, input_hash=digest, result=m.SUCCESS,
                    log_url='http://logs/1/')
    return build


def test_index_remembers_successes_and_not_reused_builds():
    index = reuse.ReuseIndex()
    build = _successful_build()
    index.add('t1', build, BuildResult(result='SUCCESS', log_url='http://logs/1/'), 'u')
    found = index.find('t1', build.input_hash)
    assert found['uuid'] == build.uuid and found['log_url'] == 'http://logs/1/'
    assert index.find('t2', build.input_hash) is None
    copy_ = _successful_build('x' * 64)
    copy_.reused_from = {'uuid': build.uuid}
    index.add('t1', copy_, BuildResult(result='SUCCESS'))
    assert index.find('t1', 'x' * 64) is None


def test_history_records_hash_class_and_finds_successes(tmp_path):
    history = BuildHistory(f'sqlite:///{tmp_path}/h.db')
    history.migrate()
    item = _item()
    bs = item.current_build_set
    ok = m.Build(_job(), bs, input_hash='1' * 64, result=m.SUCCESS, log_url='http://l/ok/',
                 result_data={'zuul': {'artifacts': [{'name': 'a', 'url': 'http://a'}]}})
    bs.builds['unit'] = ok
    retried = m.Build(_job(), bs, result=m.RETRY, failure_class='infra:unreachable')
    bs.retried_builds.append(retried)
    history.record_buildset('t1', 'check', item, 'success')
    found = history.find_build_by_input_hash('t1', '1' * 64)
    assert found['uuid'] == ok.uuid and found['log_url'] == 'http://l/ok/'
    assert found['result_data'] == {'zuul': {'artifacts': [{'name': 'a', 'url': 'http://a'}]}}
    assert history.find_build_by_input_hash('t2', '1' * 64) is None
    rows = {b['uuid']: b for b in history.get_builds('t1')}
    assert rows[retried.uuid]['final'] is False
    assert rows[retried.uuid]['failure_class'] == 'infra:unreachable'
    assert rows[ok.uuid]['input_hash'] == '1' * 64 and rows[ok.uuid]['final'] is True
    # A reused build is never a source: only builds that ran are.
    item2 = _item()
    copy_ = m.Build(_job(), item2.current_build_set, input_hash='2' * 64, result=m.SUCCESS,
                    reused_from={'uuid': ok.uuid})
    item2.current_build_set.builds['unit'] = copy_
    history.record_buildset('t1', 'gate', item2, 'success')
    assert history.find_build_by_input_hash('t1', '2' * 64) is None
    assert {b['uuid']: b for b in history.get_builds('t1')}[copy_.uuid]['reused_from'] == \
        ok.uuid


def test_migration_adds_the_columns_to_an_existing_database(tmp_path):
    import sqlalchemy as sa

    from zuul.driver.sql import history as h
    url = f'sqlite:///{tmp_path}/old.db'
    old = BuildHistory(url)
    saved = h.MIGRATIONS
    h.MIGRATIONS = saved[:2]
    try:
        # The version-2 schema: the build table without the new columns.
        with old.engine.begin() as conn:
            table = old.tables['build']
            columns = [sa.Column(c.name, c.type, primary_key=c.primary_key)
                       for c in table.columns
                       if c.name not in ('input_hash', 'failure_class', 'reused_from',
                                         'nodes')]
            meta = sa.MetaData()
            for other in ('buildset',):
                old.tables[other].to_metadata(meta)
            sa.Table(table.name, meta, *columns)
            meta.create_all(conn)
            old.metadata.create_all(conn, tables=[old.version_table, old.tables['artifact']])
            conn.execute(sa.insert(old.version_table).values(version=2))
    finally:
        h.MIGRATIONS = saved
    assert BuildHistory(url).migrate() == len(h.MIGRATIONS)
    with old.engine.connect() as conn:
        names = {c['name'] for c in sa.inspect(conn).get_columns('zuul_build')}
    # migration 3 (issue 21) and 4 (the nodes a build ran on)
    assert {'input_hash', 'failure_class', 'reused_from', 'nodes'} <= names


def test_reuse_note_links_the_original():
    note = reuse.reuse_note({'uuid': 'abc', 'change': 5, 'patchset': 2,
                             'log_url': 'http://logs/abc/'})
    assert note == '(result reused from build abc of change 5,2: identical inputs; ' \
        'http://logs/abc/)'


def test_try_reuse_needs_an_enabled_job_and_an_adapter():
    ctx = SimpleNamespace(scheduler=SimpleNamespace(executor=object()),
                          tenant=SimpleNamespace(name='t1'))
    item = _item()
    assert reuse.try_reuse(ctx, item, m.JobRef('j', frozen={'reuse_results': True})) is False
    assert reuse.try_reuse(ctx, item, m.JobRef('j')) is False


class _Handle:
    def __init__(self):
        self.canceled = False

    def wait(self, timeout):
        raise AssertionError('the scheduler thread waited for a merger answer')

    def cancel(self):
        self.canceled = True


class _Merger:
    """merger:refstate requests, answered when the test says
    (``answer``), recording them."""

    def __init__(self):
        self.requests = []
        self.callbacks = []
        self.handles = []

    def get_repo_state(self, items, callback, event_id=None):
        self.requests.append([(i.connection, i.project) for i in items])
        self.callbacks.append(callback)
        self.handles.append(_Handle())
        return self.handles[-1]

    def answer(self, result):
        self.callbacks.pop(0)(result)


def test_pinning_never_waits_and_is_decided_by_the_answer():
    from zuul.merger.protocol import RefStateResult
    item = _item()
    bs = item.current_build_set
    del bs.repo_state['gerrit']['org/lib']
    posted = []
    merger = _Merger()
    pins = reuse.Pinner(post=lambda b, r: posted.append((b, r)))
    # Asked, not waited for (the old pinning held the scheduler's thread
    # up to 30 s here); asking again does not read again.
    assert pins.pin(merger, bs, [('gerrit', 'org/lib')]) == reuse.PENDING
    assert pins.pin(merger, bs, [('gerrit', 'org/lib')]) == reuse.PENDING
    assert merger.requests == [[('gerrit', 'org/lib')]] and pins.pending == 1
    # The answer goes to the scheduler's thread (post), which takes it in.
    merger.answer(RefStateResult(updated=True, repo_state={'gerrit': {'org/lib': LIB}}))
    assert posted == [(bs, posted[0][1])] and bs.pinned_state == {}
    pins.completed(*posted[0])
    assert bs.pinned_state == {'gerrit': {'org/lib': LIB}} and pins.pending == 0
    assert pins.pin(merger, bs, [('gerrit', 'org/lib')]) == reuse.PINNED
    assert len(merger.requests) == 1


def test_pinning_that_fails_or_times_out_is_not_tried_again():
    from zuul.merger.protocol import RefStateResult
    other = _item().current_build_set
    merger = _Merger()
    pins = reuse.Pinner()
    assert pins.pin(merger, other, [('gerrit', 'org/x')]) == reuse.PENDING
    merger.answer(RefStateResult(updated=False, error='cannot fetch'))
    assert pins.pin(merger, other, [('gerrit', 'org/x')]) == reuse.UNPINNABLE
    assert len(merger.requests) == 1
    # No answer at all: the timeout decides, and the read is withdrawn.
    silent, timed = _Merger(), reuse.Pinner(timeout=0.05)
    bs = _item().current_build_set
    assert timed.pin(silent, bs, [('gerrit', 'org/y')]) == reuse.PENDING
    wait_for(lambda: timed.pending == 0, timeout=10, what='the pinning timeout')
    assert timed.pin(silent, bs, [('gerrit', 'org/y')]) == reuse.UNPINNABLE
    assert silent.handles[0].canceled
    # A late answer after the timeout changes nothing.
    silent.answer(RefStateResult(updated=True, repo_state={'gerrit': {'org/y': LIB}}))
    assert bs.pinned_state == {}
    assert reuse.Pinner().pin(None, _item().current_build_set,
                              [('gerrit', 'org/z')]) == reuse.UNPINNABLE


def test_reuse_results_is_a_job_attribute_inherited_and_overridden():
    from tests.unit.test_freeze import Layout
    from zuul.model.errors import ConfigurationError
    from zuul.model.freeze import freeze_job
    layout = Layout().add('''
- job: {name: base, parent: null}
- job: {name: unit, reuse-results: true, run: playbooks/unit.yaml}
- job: {name: unit-child, parent: unit}
- job: {name: unit-off, parent: unit, reuse-results: false}
''')
    assert freeze_job(layout, 'unit', 'master').get('reuse_results') is True
    assert freeze_job(layout, 'unit-child', 'master').get('reuse_results') is True
    assert not freeze_job(layout, 'unit-off', 'master').get('reuse_results')
    assert not freeze_job(layout, 'base', 'master').get('reuse_results')
    with pytest.raises(ConfigurationError, match='reuse-results'):
        Layout().add("- job: {name: bad, reuse-results: sometimes}")
