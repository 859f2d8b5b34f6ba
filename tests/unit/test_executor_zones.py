"""Executor zones (released ``[executor] zone``, ``allow_unzoned`` and the
node attribute ``executor-zone``): the Gearman function a build goes to,
what an executor registers, hostile zone names, and what the status page
says while a build waits for an executor of its zone."""

from __future__ import annotations

import configparser
from types import SimpleNamespace

import pytest

from zuul.executor.protocol import (
    FUNCTION_EXECUTE,
    execute_function,
    node_zone,
    valid_zone,
)
from zuul.executor.server import ExecutorServer
from zuul.executor.settings import ExecutorSettings
from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler.status import job_status


def _settings(**options) -> ExecutorSettings:
    config = configparser.RawConfigParser()
    config['executor'] = {k: str(v) for k, v in options.items()}
    return ExecutorSettings.from_config(config)


def test_a_zoned_build_goes_to_its_zone_s_function():
    assert execute_function(None) == FUNCTION_EXECUTE == 'executor:execute'
    assert execute_function('vpn') == 'executor:execute:vpn'
    assert node_zone([{'attributes': {}}, {'attributes': {'executor-zone': 'vpn'}}]) == 'vpn'
    assert node_zone([{'id': 1}]) is None and node_zone(None) is None


@pytest.mark.parametrize('name', ['', 'a b', 'x\x00y', 'a:b', '../x', 'z/1', '-lead',
                                  'a' * 65, 'vpn\n', None, 3])
def test_hostile_zone_names_are_refused(name):
    assert not valid_zone(name)
    if isinstance(name, str) and name:
        # Never a Gearman function name with a NUL or another zone's prefix.
        with pytest.raises(ValueError, match='not a valid executor zone'):
            execute_function(name)
        with pytest.raises(ValueError, match=r'\[executor\] zone'):
            _settings(zone=name)


def test_what_an_executor_registers(tmp_path):
    def functions(**options):
        settings = _settings(job_dir=tmp_path / 'b', state_dir=tmp_path / 's', **options)
        return ExecutorServer(settings, '127.0.0.1', 1, merger=None).execute_functions()
    assert functions() == ['executor:execute']
    assert functions(zone='vpn') == ['executor:execute:vpn']
    assert functions(zone='vpn', allow_unzoned='true') == ['executor:execute:vpn',
                                                           'executor:execute']
    settings = _settings(zone='eu-1.a_b', allow_unzoned='false')
    assert (settings.zone, settings.allow_unzoned) == ('eu-1.a_b', False)


def _waiting_build(zone):
    change = Change('gerrit', 'org/app', 'refs/changes/01/1/1', number=1, patchset=1,
                    branch_name='master')
    item = m.QueueItem(change=change)
    job = m.JobRef('unit')
    bs = item.current_build_set
    bs.merge_state = m.MERGE_COMPLETE
    build = m.Build(job, bs, zone=zone)
    bs.builds[job.name] = build
    return item, job, build


def test_a_build_waiting_for_its_zone_says_so_on_the_status_page():
    item, job, build = _waiting_build('vpn')
    status = job_status(item, job, zones_up={None, 'vpn'})
    assert status['waiting_status'] == 'executor zone vpn'
    status = job_status(item, job, zones_up={None})
    assert status['waiting_status'] == 'executor zone vpn: no executor of the zone is up'
    # Not known (no ZooKeeper records): the zone alone.
    assert job_status(item, job)['waiting_status'] == 'executor zone vpn'
    build.start_time = 1.0
    assert job_status(item, job, zones_up=set())['waiting_status'] is None
    item, job, _ = _waiting_build(None)
    assert job_status(item, job, zones_up=set())['waiting_status'] is None


def test_a_node_with_a_hostile_zone_ends_its_build_with_the_reason():
    from zuul.scheduler.builds import ExecutorAdapter
    events = []
    scheduler = SimpleNamespace(
        tenants={}, add_result_event=lambda kind, **args: events.append((kind, args)))
    submitted = []
    client = SimpleNamespace(execute=lambda *a, **kw: submitted.append(kw))
    adapter = ExecutorAdapter(client, scheduler, {}, lambda job, item: None)
    item, job, build = _waiting_build(None)
    nodeset = [(('node',), {'id': 1, 'attributes': {'executor-zone': 'x\x00executor:stop'}})]
    adapter.execute('t', SimpleNamespace(name='check'), item, job, nodeset, build)
    assert submitted == []
    ((kind, args),) = events
    assert kind == 'build-completed' and args['result'] == m.FAILURE
    assert 'executor-zone' in args['error_detail'] and 'not a valid zone' in args['error_detail']
