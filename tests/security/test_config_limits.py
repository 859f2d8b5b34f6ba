"""Untrusted configuration is bounded.

Each attack is an unreviewed change to an untrusted project whose config
would make the scheduler spend unbounded stack, time or memory: a very
long chain of parents, a huge or deeply nested file, YAML aliases that
expand exponentially. Each must become a config error on that change
(naming the file and, where there is one, the line) while items queued
behind it are still processed.
"""

from __future__ import annotations

import inspect
import sys

import pytest

from tests.security.speculative import SpeculativeTenant, enqueue, setup_manager
from tests.unit.test_freeze import Layout, _sc
from tests.unit.test_layout_loader import PIPELINES
from zuul.configloader.layout import ConfigFile
from zuul.configloader.limits import MAX_CONFIG_BYTES, MAX_JOBS
from zuul.lib.yamlutil import MAX_ALIAS_EXPANSION, MAX_NESTING_DEPTH
from zuul.model import item as m
from zuul.model.freeze import (
    MAX_INHERITANCE_DEPTH,
    FreezeError,
    freeze_job,
    freeze_job_graph,
)
from zuul.scheduler.reporting import format_report

APP_JOBS = """
- job:
    name: app-unit
    run: playbooks/unit.yaml
- project:
    check:
      jobs: [app-unit]
    gate:
      jobs: [app-unit]
"""

ATTACK = 'zuul.d/zz-attack.yaml'


@pytest.fixture
def tenant(tmp_path):
    return SpeculativeTenant(tmp_path, {'org/app': {'zuul.d/jobs.yaml': APP_JOBS},
                                        'org/lib': {}})


def _chain(n: int, prefix: str = 'chain') -> str:
    lines = [f'- job: {{name: {prefix}-1, run: playbooks/x.yaml}}']
    lines += [f'- job: {{name: {prefix}-{i}, parent: {prefix}-{i - 1}}}'
              for i in range(2, n + 1)]
    return '\n'.join(lines) + '\n'


def _config_errors(tenant, item, pipeline='check'):
    jobs, errors = tenant.freeze(pipeline, item)
    assert jobs == []
    return errors


# -- inheritance depth ------------------------------------------------------------


def test_a_1000_job_chain_is_a_config_error_and_the_queue_moves_on(tenant):
    """Change 1 adds a chain of 1000 jobs and runs the last one; change 2,
    behind it in the same gate queue, must still be tested and merge."""
    chain = _chain(1000) + '- project:\n    gate:\n      jobs: [chain-1000]\n'
    ctx, manager = setup_manager(tenant, 'gate', {1: {ATTACK: chain}})
    first = enqueue(tenant, ctx, 'org/app', 1)
    enqueue(tenant, ctx, 'org/app', 2)
    ctx.run()
    assert ctx.reports == [(1, 'config-error'), (2, 'success')]
    assert [(job, result, tested) for job, result, tested in ctx.history
            if tested == (2,)] == [('app-unit', m.SUCCESS, (2,))]
    assert not any('chain' in job for job, _, _ in ctx.history)
    (error,) = first.current_build_set.config_errors
    assert error.path == ATTACK and error.line == 100 and error.project == 'org/app'
    assert f'inheritance depth of job "chain-100" exceeds {MAX_INHERITANCE_DEPTH}' in \
        error.reason
    report = format_report(tenant.pipeline('gate'), first, 'config-error')
    assert f'{ATTACK}:100: in job "chain-100": inheritance depth' in report
    assert not list(manager.all_items())


def test_freezing_refuses_a_chain_deeper_than_the_bound():
    """Even when the layout's static check is not in the way, freezing
    stops at MAX_INHERITANCE_DEPTH with a FreezeError, not RecursionError."""
    untrusted = _sc('org/app', 'master', trusted=False)
    layout = Layout().add('- job: {name: base, parent: null}\n')
    layout.add(_chain(1000), untrusted)
    with pytest.raises(FreezeError, match=f'Inheritance depth of job "chain-1000" exceeds '
                                          f'{MAX_INHERITANCE_DEPTH}'):
        freeze_job(layout, 'chain-1000', 'master')
    pipeline = type('Pipeline', (), {'name': 'check', 'post_review': False,
                                     'allow_secrets': True})()
    graph, errors = freeze_job_graph(layout, 'org/app', pipeline, 'master',
                                     job_list=[layout.pp('chain-1000', untrusted),
                                               layout.pp('chain-5', untrusted)])
    assert list(graph.jobs) == ['chain-5']
    assert len(errors) == 1 and errors[0].startswith('Inheritance depth of job "chain-1000"')


def test_freezing_the_longest_allowed_chain_does_not_recurse():
    """The walk is iterative: a chain at the bound freezes with only a few
    dozen frames of stack to spare."""
    layout = Layout().add('- job: {name: base, parent: null}\n')
    layout.add(_chain(MAX_INHERITANCE_DEPTH - 1))
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 40)
    try:
        frozen = freeze_job(layout, f'chain-{MAX_INHERITANCE_DEPTH - 1}', 'master')
    finally:
        sys.setrecursionlimit(old)
    assert len(frozen.variants) == MAX_INHERITANCE_DEPTH


def test_a_long_chain_of_dependencies_does_not_recurse(tenant):
    """1000 jobs in one project-pipeline, each depending on the previous,
    listed last first (so resolving the first walks the whole chain)."""
    jobs = ''.join(f'- job: {{name: d{i}, run: playbooks/x.yaml}}\n' for i in range(1000))
    deps = ''.join(f'        - d{i}:\n            dependencies: [d{i - 1}]\n'
                   for i in range(999, 0, -1))
    item = tenant.propose('org/app', 1, {ATTACK: jobs + '- project:\n    check:\n'
                                         '      jobs:\n' + deps + '        - d0\n'})
    jobs, errors = tenant.freeze('check', item)
    assert errors == []
    names = [j.name for j in jobs if j.name.startswith('d')]
    assert names == [f'd{i}' for i in range(1000)]


# -- size of a project-branch's config -------------------------------------------------


def test_an_oversized_config_is_a_config_error(tenant):
    huge = '- job:\n    name: huge\n    description: "' + 'x' * MAX_CONFIG_BYTES + '"\n'
    item = tenant.propose('org/app', 1, {'zuul.d/huge.yaml': huge})
    (error,) = _config_errors(tenant, item)
    assert error.path == 'zuul.d/huge.yaml' and error.project == 'org/app'
    assert f'more than the limit of {MAX_CONFIG_BYTES} bytes for an untrusted ' \
           'project-branch' in error.reason
    assert 'none of it was loaded' in error.reason
    layout = item.current_build_set.layout
    assert 'huge' not in layout.jobs and 'app-unit' not in layout.jobs


def test_too_many_jobs_is_a_config_error(tenant):
    many = ''.join(f'- job: {{name: j{i}}}\n' for i in range(MAX_JOBS + 1))
    item = tenant.propose('org/app', 1, {ATTACK: many})
    (error,) = _config_errors(tenant, item)
    # app-unit (zuul.d/jobs.yaml) is job 1, so the file's last stanza crosses
    assert (error.path, error.line) == (ATTACK, MAX_JOBS)
    assert f'defines {MAX_JOBS + 2} jobs, more than the limit of {MAX_JOBS}' in error.reason
    assert 'j0' not in item.current_build_set.layout.jobs


def test_config_projects_are_not_limited(tenant):
    config = tenant.layout.tenant.config_projects[0]
    many = ''.join(f'- job: {{name: j{i}}}\n' for i in range(MAX_JOBS + 1))
    layout = tenant.layouts.loader.load(tenant.layout.tenant, [
        ConfigFile('zuul.yaml', PIPELINES + many, config, 'master')])
    assert f'j{MAX_JOBS}' in layout.jobs
    assert [str(e) for e in layout.errors] == []


# -- YAML itself ----------------------------------------------------------------------


def _nested(depth: int) -> str:
    return ('- job:\n    name: deep\n    vars:\n      v: ' + '[' * (depth - 4) + ']' *
            (depth - 4) + '\n')


def test_yaml_nested_too_deep_is_a_config_error(tenant):
    item = tenant.propose('org/app', 1, {ATTACK: _nested(MAX_NESTING_DEPTH + 1)})
    (error,) = _config_errors(tenant, item)
    assert error.path == ATTACK and error.line == 1
    assert error.reason == (f'YAML limit exceeded: collections nested more than '
                            f'{MAX_NESTING_DEPTH} levels deep')


def test_yaml_nested_to_the_limit_loads(tenant):
    item = tenant.propose('org/app', 1, {ATTACK: _nested(MAX_NESTING_DEPTH)})
    jobs, errors = tenant.freeze('check', item)
    assert errors == [] and [j.name for j in jobs] == ['app-unit']
    assert 'deep' in item.current_build_set.layout.jobs


BILLION_LAUGHS = """
- job:
    name: laughs
    vars:
      a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]
      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
      g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
      h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
      i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_yaml_alias_expansion_is_a_config_error(tenant):
    item = tenant.propose('org/app', 1, {ATTACK: BILLION_LAUGHS})
    (error,) = _config_errors(tenant, item)
    assert error.path == ATTACK and error.line is not None
    assert error.reason == (f'YAML limit exceeded: aliases expand the document by more '
                            f'than {MAX_ALIAS_EXPANSION} nodes')


def test_a_recursive_yaml_alias_is_a_config_error(tenant):
    item = tenant.propose('org/app', 1, {ATTACK: '- job:\n    name: loop\n    vars:\n'
                                         '      a: &a [*a]\n'})
    (error,) = _config_errors(tenant, item)
    assert (error.path, error.line) == (ATTACK, 4)
    assert 'an alias refers to a collection that contains it' in error.reason


def test_modest_aliases_still_load(tenant):
    item = tenant.propose('org/app', 1, {ATTACK: """
- job:
    name: shared
    vars: &vars {python: ['3.11', '3.12'], tox: {env: py}}
    run: playbooks/x.yaml
- job:
    name: shared2
    vars: *vars
    run: playbooks/x.yaml
- project:
    check:
      jobs: [shared, shared2]
"""})
    jobs, errors = tenant.freeze('check', item)
    assert errors == []
    frozen = {j.name: j.frozen for j in jobs}
    assert frozen['shared2'].get('vars') == {'python': ['3.11', '3.12'], 'tox': {'env': 'py'}}
