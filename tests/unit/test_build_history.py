"""Build history on SQLite: migrations, recording, filters, paging."""

import pytest

from zuul.driver.sql.history import MIGRATIONS, BuildHistory
from zuul.model import item as m
from zuul.model.change import Change


@pytest.fixture
def history(tmp_path):
    h = BuildHistory(f'sqlite:///{tmp_path}/history.db', table_prefix='t_')
    assert h.migrate() == len(MIGRATIONS)
    return h


def _item(number, results):
    change = Change('gerrit', 'org/project', f'refs/changes/0{number}/{number}/1',
                    number=number, patchset=1, branch_name='master', url=f'https://r/{number}')
    item = m.QueueItem(change=change)
    bs = item.current_build_set
    bs.jobs = [m.JobRef(name, voting=(name != 'docs')) for name in results]
    for i, (name, result) in enumerate(results.items()):
        build = m.Build(bs.job(name), bs, result=result, start_time=1000.0 + i,
                        end_time=1010.0 + i, log_url=f'https://logs/{number}/{name}/')
        if name == 'unit':
            build.result_data = {'zuul': {'artifacts': [{'name': 'docs', 'url': 'docs/'}]}}
        bs.builds[name] = build
    return item


def test_migrate_is_idempotent(history):
    assert history.schema_version() == len(MIGRATIONS)
    assert history.migrate() == len(MIGRATIONS)


def test_record_and_query_with_filters_and_paging(history):
    pipeline = type('P', (), {'name': 'check'})()
    history.record_buildset('t1', pipeline, _item(1, {'unit': 'SUCCESS', 'docs': 'FAILURE'}),
                            'success', 'Build succeeded.')
    history.record_buildset('t1', pipeline, _item(2, {'unit': 'FAILURE'}), 'failure')
    history.record_buildset('t2', pipeline, _item(3, {'unit': 'SUCCESS'}), 'success')
    builds = history.get_builds('t1')
    assert [(b['change'], b['job_name']) for b in builds] == \
        [(2, 'unit'), (1, 'docs'), (1, 'unit')]
    assert builds[0]['duration'] == 10.0 and builds[0]['pipeline'] == 'check'
    assert [b['change'] for b in history.get_builds('t1', result='FAILURE')] == [2, 1]
    assert [b['job_name'] for b in history.get_builds('t1', job_name='docs')] == ['docs']
    assert [b['change'] for b in history.get_builds('t1', limit=1, offset=1)] == [1]
    assert history.get_builds('t1', project='org/other') == []
    sets = history.get_buildsets('t1')
    assert [(s['change'], s['result']) for s in sets] == [(2, 'FAILURE'), (1, 'SUCCESS')]
    assert history.get_buildsets('t2')[0]['change'] == 3  # tenants do not mix
    unit_1 = history.get_builds('t1', change=1, job_name='unit')[0]
    assert history.get_build_artifacts(unit_1['uuid']) == [
        {'name': 'docs', 'url': 'docs/', 'meta': None}]
    assert history.average_duration('t1', 'unit') == 10.0
