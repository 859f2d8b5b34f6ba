"""Real configurations from the corpus's zuul-configs must load (the corpus
tier: ``GATEKEEP_CORPUS=DIR``, see tests/harness/corpus.py).

Each repository is loaded on its own, and OpenDev's ``openstack`` tenant
is loaded from its real main.yaml with the three repositories of it the
corpus holds. The only errors allowed are references to objects that
live in repositories the corpus does not have (base jobs, nodesets from
opendev/zuul-providers, templates from openstack/requirements, pipelines
of another repository), and the errors naming pipeline connections whose
driver this system does not have (gitea)."""

from __future__ import annotations

import re

import pytest

from tests.harness import corpus
from zuul.configloader.layout import LayoutLoader, read_repo_config
from zuul.configloader.tenant import load_tenant_config
from zuul.driver.registry import default_registry
from zuul.lib import yamlutil
from zuul.model.tenant import TenantProject

pytestmark = pytest.mark.corpus

CORPUS = corpus.path('zuul-configs')

# Connection names the corpus deployments use, and their drivers.
CONNECTIONS = {'gerrit': 'gerrit', 'gerrithub': 'gerrit', 'opendev': 'gerrit',
               'googlesource': 'gerrit', 'github': 'github', 'gitlab': 'gitlab',
               'gitea': 'gitea', 'smtp': 'smtp', 'mysql': 'sql', 'sql': 'sql'}
HOSTNAMES = {'gerrit': 'opendev.org', 'github': 'github.com',
             'googlesource': 'gerrit.googlesource.com'}
UNSUPPORTED_DRIVERS = {'gitea'}

REFERENCE = re.compile(
    r'^(?:[\w-]+: job "[^"]+": )?(unknown parent job|unknown nodeset|unknown '
    r'project-template|unknown secret) "[^"]+"$|^[\w-]+: job "[^"]+" is not defined$'
    r'|^"[\w-]+" is neither a project attribute nor a pipeline of this tenant$'
    # OpenDev's tenants say use-nodepool: false; their label objects live
    # in opendev/zuul-providers, which the corpus does not hold.
    r'|^(?:.*: )?the label "[^"]+" is not defined by a label object \(the tenant does not '
    r'use Nodepool\)$')
UNSUPPORTED = re.compile(r'connection "(\w+)" uses the driver "(\w+)", which this system '
                         r'does not have')

REPOS = corpus.cases('repositories (zuul-configs/*)',
                     lambda root: sorted(p.name for p in (root / 'zuul-configs').iterdir()))


def _unexpected(layout):
    out = []
    for e in layout.errors:
        m = UNSUPPORTED.search(e.reason)
        if m and m.group(2) in UNSUPPORTED_DRIVERS:
            continue
        if e.severity == 'error' and REFERENCE.match(e.reason):
            continue
        out.append(str(e))
    return out


def _stanza_count(files, kind: str) -> int:
    n = 0
    for f in files:
        data = yamlutil.load(f.text, f.path) or []
        n += sum(1 for element in data if isinstance(element, dict) and kind in element)
    return n


def test_corpus_present():
    assert len([p for p in CORPUS.iterdir() if p.is_dir()]) >= 8


@pytest.mark.parametrize('repo', REPOS)
def test_each_corpus_repository_loads(repo):
    tp = TenantProject('gerrit', repo.replace('+', '/'), trusted=True)
    files, file_errors = read_repo_config(str(CORPUS / repo), tp, 'master',
                                          extra_paths=('zuul-tests.d/',))
    assert files, f'no configuration found in {repo}'
    layout = LayoutLoader(default_registry(), CONNECTIONS, HOSTNAMES).load(
        None, files, file_errors=file_errors)
    assert _unexpected(layout) == []
    # Every job stanza became a variant: nothing was silently dropped.
    assert sum(len(v) for v in layout.jobs.values()) == _stanza_count(files, 'job')
    assert len(layout.pipelines) == _stanza_count(files, 'pipeline')


def test_opendev_openstack_tenant_loads():
    tenant = load_tenant_config(str(CORPUS / 'openstack+project-config' / 'zuul' /
                                    'main.yaml')).tenants['openstack']
    repos = {'openstack/project-config': 'openstack+project-config',
             'zuul/zuul-jobs': 'g-chauvel+zuul-jobs',
             'openstack/openstack-zuul-jobs': 'openstack+openstack-zuul-jobs'}
    files, file_errors = [], []
    for tp in tenant.projects:
        if tp.name in repos:
            f, e = read_repo_config(str(CORPUS / repos[tp.name]), tp, 'master',
                                    tp.extra_config_paths)
            files += f
            file_errors += e
    layout = LayoutLoader(default_registry(), CONNECTIONS, HOSTNAMES).load(
        tenant, files, file_errors=file_errors)
    assert _unexpected(layout) == []
    assert {'check', 'gate', 'post', 'periodic'} <= set(layout.pipelines)
    gate = layout.pipelines['gate']
    assert gate.manager == 'dependent' and 'gerrit' in gate.triggers
    # OpenDev's GitHub triggers and reporters load with the github driver.
    assert 'github' in layout.pipelines['check'].triggers
    # Real secrets stay encrypted, chunked, until a job runs.
    secret = next(iter(layout.secrets.values()))
    assert all(v.ciphertext for v in secret.encrypted_values())
    # The projects file names projects of this tenant by several names
    # (canonical ones included) and uses the openstack-zuul-jobs templates.
    nova = layout.get_project_configs('openstack/nova')
    assert nova and any(c.templates for c in nova)
    assert layout.get_project_configs('gerrit.googlesource.com/gerrit')
    ppc = layout.get_project_pipeline_config('openstack/nova', 'check', 'master')
    assert ppc is not None and ppc.job_list
