"""Configuration loading at scale: a generated tenant of many projects and
jobs (a config project with pipelines and base jobs, a shared job library,
and per-project ``.zuul.yaml`` files with templates and variants), loaded
through the same LayoutLoader the scheduler uses, then every project's
check job graph frozen.

    .venv/bin/python -m benchmarks.config_load [--projects N] [--rounds R]

Prints a table: median load time over the rounds, the peak Python memory
of one load (tracemalloc), and frozen jobs per second. Also loads the
real OpenDev tenant from ../shared/corpus when it is present. Library
jobs inherit in chains (base <- lib-job-N0 <- lib-job-N <- project unit
<- project functional), so freezing walks four parents deep.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import time
import tracemalloc

from zuul.configloader.layout import ConfigFile, LayoutLoader, read_repo_config
from zuul.driver.registry import default_registry
from zuul.model.freeze import freeze_job_graph
from zuul.model.tenant import Tenant, TenantProject

CORPUS = pathlib.Path(__file__).resolve().parents[2] / 'shared' / 'corpus' / 'zuul-configs'

PIPELINES = """
- pipeline:
    name: check
    manager: independent
    trigger:
      gerrit:
        - event: patchset-created
        - event: comment-added
          comment: (?i)^\\s*recheck\\s*$
    success:
      gerrit:
        Verified: 1
    failure:
      gerrit:
        Verified: -1
- pipeline:
    name: gate
    manager: dependent
    post-review: true
    trigger:
      gerrit:
        - event: comment-added
          approval:
            - Workflow: 1
    success:
      gerrit:
        Verified: 2
        submit: true
- nodeset:
    name: ubuntu
    nodes:
      - name: node
        label: ubuntu-jammy
- job:
    name: base
    parent: null
    nodeset: ubuntu
    pre-run: playbooks/base/pre.yaml
    post-run: playbooks/base/post.yaml
    timeout: 1800
"""


def library(n_jobs: int) -> str:
    parts = []
    for i in range(n_jobs):
        parent = 'base' if i % 10 == 0 else f'lib-job-{i - i % 10}'
        parts.append(f"""
- job:
    name: lib-job-{i}
    parent: {parent}
    description: Library job {i}.
    run: playbooks/lib-{i}.yaml
    vars:
      level: {i}
      nested: {{a: {i}, b: [1, 2, 3]}}
    irrelevant-files:
      - ^doc/.*$
      - ^.*\\.rst$
- job:
    name: lib-job-{i}
    branches: ^stable/.*
    vars: {{stable: true}}
""")
    parts.append("""
- project-template:
    name: lib-template
    check:
      jobs: [lib-job-0, lib-job-1, lib-job-2]
    gate:
      jobs: [lib-job-0, lib-job-1]
""")
    return ''.join(parts)


def project_file(i: int, n_lib: int) -> str:
    return f"""
- job:
    name: project-{i}-unit
    parent: lib-job-{i % n_lib}
    run: playbooks/unit.yaml
    files: ['^src/.*$']
- job:
    name: project-{i}-functional
    parent: project-{i}-unit
    vars: {{functional: true}}
- project:
    templates: [lib-template]
    check:
      jobs:
        - project-{i}-unit
        - project-{i}-functional:
            voting: false
            dependencies: [project-{i}-unit]
    gate:
      jobs:
        - project-{i}-unit
"""


def generate(n_projects: int, n_lib: int):
    config = TenantProject('gerrit', 'org/project-config', trusted=True)
    lib = TenantProject('gerrit', 'org/jobs-library', trusted=False)
    projects = [TenantProject('gerrit', f'org/project-{i}', trusted=False)
                for i in range(n_projects)]
    tenant = Tenant(name='bench', projects=[config, lib] + projects)
    files = [ConfigFile('zuul.d/pipelines.yaml', PIPELINES, config, 'master'),
             ConfigFile('zuul.yaml', library(n_lib), lib, 'master')]
    files += [ConfigFile('.zuul.yaml', project_file(i, n_lib), p, 'master')
              for i, p in enumerate(projects)]
    return tenant, files


def timed(fn, rounds: int):
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def corpus_tenant():
    from zuul.configloader.tenant import load_tenant_config
    main = CORPUS / 'openstack+project-config' / 'zuul' / 'main.yaml'
    if not main.exists():
        return None
    tenant = load_tenant_config(str(main)).tenants['openstack']
    repos = {'openstack/project-config': 'openstack+project-config',
             'zuul/zuul-jobs': 'g-chauvel+zuul-jobs',
             'openstack/openstack-zuul-jobs': 'openstack+openstack-zuul-jobs'}
    files = []
    for tp in tenant.projects:
        if tp.name in repos:
            files += read_repo_config(str(CORPUS / repos[tp.name]), tp, 'master',
                                      tp.extra_config_paths)[0]
    return tenant, files


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--projects', type=int, default=1000)
    parser.add_argument('--library-jobs', type=int, default=500)
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args(argv)
    loader = LayoutLoader(default_registry(), connections={'gerrit': 'gerrit'},
                          canonical_hostnames={'gerrit': 'review.example.org',
                                               'github': 'github.com',
                                               'googlesource': 'gerrit.googlesource.com'})
    rows = []
    tenant, files = generate(args.projects, args.library_jobs)
    t_load, layout = timed(lambda: loader.load(tenant, files), args.rounds)
    n_variants = sum(len(v) for v in layout.jobs.values())
    assert not [e for e in layout.errors if e.severity == 'error'], list(layout.errors)[:3]
    rows.append(('generated tenant: load + validate', f'{len(files)} files, '
                 f'{len(layout.jobs)} jobs, {n_variants} variants', t_load))
    tracemalloc.start()
    loader.load(tenant, files)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    check = layout.pipelines['check']

    def freeze_all():
        n = 0
        for i in range(args.projects):
            graph, errors = freeze_job_graph(layout, f'org/project-{i}', check, 'master',
                                             files=['src/x.py'])
            n += len(graph.jobs)
        return n
    t_freeze, n_frozen = timed(freeze_all, args.rounds)
    rows.append(('freeze every project\'s check graph', f'{n_frozen} jobs', t_freeze))
    extra = [('peak memory of one load', f'{peak / 2**20:.1f} MiB'),
             ('frozen jobs per second', f'{n_frozen / t_freeze:,.0f}')]
    loaded = corpus_tenant()
    if loaded:
        ctenant, cfiles = loaded
        loader.connections = {'gerrit': 'gerrit', 'github': 'github',
                              'googlesource': 'gerrit'}
        t_corpus, clayout = timed(lambda: loader.load(ctenant, cfiles), args.rounds)
        rows.append(('OpenDev openstack tenant (corpus)',
                     f'{len(cfiles)} files, {len(clayout.jobs)} jobs, '
                     f'{len(clayout.project_configs)} projects', t_corpus))
    width = max(len(r[0]) for r in rows)
    print(f'{"case":<{width}}  {"size":<40}  {"median ms":>10}')
    print('-' * (width + 54))
    for name, size, seconds in rows:
        print(f'{name:<{width}}  {size:<40}  {seconds * 1000:>10.3f}')
    for name, value in extra:
        print(f'{name:<{width}}  {value:<40}')


if __name__ == '__main__':
    main()
