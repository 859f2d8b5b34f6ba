"""The unparsed configuration cache in ZooKeeper (zuul/zk/config_cache.py,
zuul/scheduler/layouts.py): a scheduler that starts builds its layouts
from it without asking the mergers again; a reconfiguration re-reads only
the project that changed, and another scheduler then sees the new files,
never the old; damaged entries and hostile project names are harmless."""

from __future__ import annotations

import textwrap
import zlib

from tests.unit.scheduler_support import HOST, DictFetcher
from zuul.driver.registry import default_registry
from zuul.scheduler.connections import ConnectionRegistry
from zuul.scheduler.layouts import Layouts
from zuul.zk.config_cache import CONFIG_CACHE_ROOT, ConfigCacheStore

N = 30
CONFIG = """
- pipeline:
    name: check
    manager: independent
    trigger: {}
- job:
    name: base
    parent: null
"""


def _project(job: str) -> str:
    return f'- job: {{name: {job}}}\n- project: {{check: {{jobs: [{job}]}}}}\n'


class CountingFetcher(DictFetcher):
    def __init__(self, repos):
        super().__init__(repos)
        self.reads: list[str] = []

    def branches(self, connection, project):
        self.reads.append(project)
        return super().branches(connection, project)


def _setup(tmp_path, extra=()):
    projects = [f'org/p{i:02d}' for i in range(N)] + list(extra)
    main = tmp_path / 'main.yaml'
    main.write_text(textwrap.dedent(f"""
        - tenant:
            name: t1
            source:
              gerrit:
                config-projects: [org/config]
                untrusted-projects: [{', '.join(projects)}]
        """))
    repos = {'org/config': {'master': CONFIG}}
    repos.update({p: {'master': _project(f'job-{i}')} for i, p in enumerate(projects)})
    return str(main), repos


def _layouts(main, repos, zk) -> tuple[Layouts, CountingFetcher]:
    fetcher = CountingFetcher(repos)
    layouts = Layouts(main, ConnectionRegistry(), default_registry(), fetcher,
                      {'gerrit': 'gerrit'}, {'gerrit': HOST})
    layouts.shared_cache = ConfigCacheStore(zk)
    return layouts, fetcher


def _jobs(layout) -> set:
    return set(layout.jobs)


def test_a_starting_scheduler_reads_no_repository_and_sees_every_change(tmp_path,
                                                                         zk_chroot):
    main, repos = _setup(tmp_path)
    first, first_reads = _layouts(main, repos, zk_chroot.client())
    loaded = first.load()['t1']
    assert len(first_reads.reads) == N + 1 and first.fetched_projects == N + 1
    # Another scheduler starting: everything from ZooKeeper, no merger read.
    second, second_reads = _layouts(main, repos, zk_chroot.client())
    assert _jobs(second.load(keep_shared=True)['t1']) == _jobs(loaded) != set()
    assert second_reads.reads == []
    # One project's config changes: the first re-reads only that one...
    repos['org/p03'] = {'master': _project('renamed')}
    again = first.load(tenant_names=['t1'], projects=['org/p03'])['t1']
    assert first_reads.reads[N + 1:] == ['org/p03']
    assert 'renamed' in _jobs(again) and 'job-3' not in _jobs(again)
    # ...and the other, told of it, builds from the new files (cached by
    # the first), still without a merger read.
    seen = second.load(tenant_names=['t1'], projects=['org/p03'], keep_shared=True)['t1']
    assert 'renamed' in _jobs(seen) and second_reads.reads == []


def test_an_operator_full_reconfiguration_empties_the_cache(tmp_path, zk_chroot):
    main, repos = _setup(tmp_path)
    zk = zk_chroot.client()
    first, _ = _layouts(main, repos, zk)
    first.load()
    assert zk.get_children(CONFIG_CACHE_ROOT)
    repos['org/p05'] = {'master': _project('changed-behind-our-back')}
    # A full reload (the operator's) reads everything again and caches anew.
    first.load()
    second, reads = _layouts(main, repos, zk)
    assert 'changed-behind-our-back' in _jobs(second.load(keep_shared=True)['t1'])
    assert reads.reads == []


def test_damaged_entries_and_hostile_names(tmp_path, zk_chroot):
    hostile = 'org/../../zuul/scheduler/leader'
    main, repos = _setup(tmp_path, extra=[hostile])
    zk = zk_chroot.client()
    first, _ = _layouts(main, repos, zk)
    first.load()
    store = ConfigCacheStore(zk)
    # The name stays one znode under the cache (quoted), nowhere else.
    assert not zk.exists('/zuul/scheduler/leader')
    assert store.get('gerrit', hostile) is not None
    # A damaged entry (killed half-way, another version) counts as missing.
    path = f'{CONFIG_CACHE_ROOT}/gerrit/org%2Fp07'
    zk.set(path, b'not zlib at all')
    zk.set(f'{CONFIG_CACHE_ROOT}/gerrit/org%2Fp08', zlib.compress(b'{"version": 99}'))
    second, reads = _layouts(main, repos, zk)
    assert 'job-7' in _jobs(second.load(keep_shared=True)['t1'])
    assert sorted(reads.reads) == ['org/p07', 'org/p08']
    assert store.get('gerrit', 'org/p07') is not None     # cached again
