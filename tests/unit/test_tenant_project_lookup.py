"""Layouts._tenant_project: a tenant's project by name or canonical name,
on a connection or any, the first in the tenant's order; the index it
uses follows a tenant whose project list grew."""

from types import SimpleNamespace

from zuul.model.tenant import TenantProject
from zuul.scheduler.layouts import Layouts


def _layouts():
    layouts = Layouts.__new__(Layouts)      # only the lookup is exercised
    layouts.canonical_hostnames = {'gerrit': 'review.example.org',
                                   'github': 'github.com'}
    return layouts


def test_by_name_canonical_name_and_connection_first_in_order():
    a = TenantProject('gerrit', 'org/a', True)
    b_github = TenantProject('github', 'org/b', False)
    b_gerrit = TenantProject('gerrit', 'org/b', False)
    layout = SimpleNamespace(tenant=SimpleNamespace(projects=[a, b_github, b_gerrit]))
    layouts = _layouts()
    assert layouts._tenant_project(layout, None, 'org/a') is a
    assert layouts._tenant_project(layout, None, 'review.example.org/org/a') is a
    assert layouts._tenant_project(layout, 'github', 'org/a') is None
    assert layouts._tenant_project(layout, None, 'org/b') is b_github
    assert layouts._tenant_project(layout, 'gerrit', 'org/b') is b_gerrit
    assert layouts._tenant_project(layout, None, 'review.example.org/org/b') is b_gerrit
    assert layouts._tenant_project(layout, None, 'github.com/org/a') is None
    assert not layouts.has_project(layout, None, 'org/c')
    c = TenantProject('gerrit', 'org/c', False)
    layout.tenant.projects.append(c)
    assert layouts._tenant_project(layout, None, 'org/c') is c
