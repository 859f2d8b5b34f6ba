"""An unexpected exception while processing one queue item fails that item
alone: it is reported as a config error (without the exception's text),
leaves the pipeline, and every other item still gets its builds."""

from __future__ import annotations

import pytest

from tests.unit.pipeline_support import _change, _pipeline, _setup
from zuul.manager.base import INTERNAL_ERROR
from zuul.model import item as m


def _explode_for(ctx, number: int, exc: Exception, where: str = 'freeze_jobs'):
    """Make ``ctx.<where>`` raise ``exc`` for change ``number`` only."""
    original = getattr(ctx, where)

    def exploding(pipeline, item, *args):
        if item.change.number == number:
            raise exc
        return original(pipeline, item, *args)
    setattr(ctx, where, exploding)


@pytest.mark.parametrize('pipeline', [_pipeline('check', 'independent'), _pipeline()],
                         ids=['independent', 'dependent'])
def test_an_item_whose_freezing_raises_fails_alone(pipeline):
    ctx, manager = _setup(pipeline)
    _explode_for(ctx, 2, RecursionError('maximum recursion depth exceeded (internal)'))
    items = {n: manager.add_change(_change(ctx, n)) for n in (1, 2, 3)}
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'success'), (2, 'config-error'), (3, 'success')]
    tested = [t for _, _, t in ctx.history]
    assert all(2 not in t for t in tested if t[-1] != 2)
    assert {t[-1] for t in tested} == {1, 3}
    assert [r for j, r, t in ctx.history if t[-1] == 3][-1] == m.SUCCESS
    (error,) = items[2].current_build_set.config_errors
    assert error == INTERNAL_ERROR.format(event_id=items[2].event_id)
    assert 'internal' not in error and 'recursion' not in error
    assert not list(manager.all_items())


def test_an_item_whose_job_launch_raises_fails_alone():
    """Not only freezing: any step of processing an item (here, asking for
    nodes) is contained to that item."""
    ctx, manager = _setup(_pipeline('check', 'independent'), nodes=True)
    _explode_for(ctx, 1, KeyError('nodeset'), where='request_nodes')
    for n in (1, 2):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert sorted(ctx.reports) == [(1, 'config-error'), (2, 'success')]
    assert ctx.history == [('job1', m.SUCCESS, (2,))]
    assert not list(manager.all_items())


def test_a_failing_report_of_the_failure_still_dequeues_the_item():
    ctx, manager = _setup(_pipeline('check', 'independent'))
    _explode_for(ctx, 1, ValueError('freeze'))
    report = ctx.report

    def flaky_report(pipeline, item, action):
        if action == 'config-error':
            raise OSError('reporter down')
        return report(pipeline, item, action)
    ctx.report = flaky_report
    for n in (1, 2):
        manager.add_change(_change(ctx, n))
    ctx.run()
    assert ctx.reports == [(2, 'success')]
    assert not list(manager.all_items())
