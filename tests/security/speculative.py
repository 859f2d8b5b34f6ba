"""A tenant as the scheduler loads it, for attacks made through config.

``SpeculativeTenant`` loads main.yaml and the projects' files (served by
a fake fetcher) through the scheduler's own ``Layouts``; ``propose``
builds the queue item of an unreviewed change whose speculative merge
left new config files, so ``freeze_jobs`` takes exactly the path a real
change takes (speculative layout, errors it introduces, freezing).
``SpeculativeCollaborators`` plugs that into the deterministic pipeline
manager harness of tests/unit/test_pipeline_managers.py.
"""

from __future__ import annotations

import textwrap

from tests.unit.pipeline_support import Collaborators
from tests.unit.test_layout_loader import PIPELINES
from zuul.driver.registry import default_registry
from zuul.manager import manager_for
from zuul.merger.protocol import ProjectFiles
from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler.layouts import Layouts

MAIN_YAML = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects:
          - org/project-config
        untrusted-projects:
          - org/app
          - org/lib
"""

BASE_CONFIG = PIPELINES


class RepoFetcher:
    """Branches and config files of the tenant's repositories (master only)."""

    def __init__(self, repos: dict):
        self.repos = repos

    def branches(self, connection, project):
        return ['master']

    def files(self, connection, project, branch, paths):
        return dict(self.repos.get(project, {}))


class SpeculativeTenant:
    def __init__(self, tmp_path, repos: dict):
        main = tmp_path / 'main.yaml'
        main.write_text(MAIN_YAML)
        self.repos = {'org/project-config': {'zuul.yaml': BASE_CONFIG}}
        for project, files in repos.items():
            self.repos[project] = {p: textwrap.dedent(t) for p, t in files.items()}
        self.layouts = Layouts(str(main), connections={}, drivers=default_registry(),
                               fetcher=RepoFetcher(self.repos),
                               connection_drivers={'gerrit': 'gerrit'},
                               canonical_hostnames={'gerrit': 'review.example.org'})
        self.layout = self.layouts.load()['t1']
        errors = [str(e) for e in self.layout.errors if e.severity == 'error']
        assert not errors, errors

    def pipeline(self, name: str):
        return self.layout.pipelines[name]

    def propose(self, project: str, number: int, files: dict | None = None) -> m.QueueItem:
        """The item of change ``number`` to ``project``, merged: with
        ``files`` (path -> text) it changes the project's configuration."""
        item = m.QueueItem(change=self.change(project, number, files))
        self.merged(item, files)
        return item

    def change(self, project: str, number: int, files: dict | None = None) -> Change:
        change = Change('gerrit', project, f'refs/changes/{number:02d}/{number}/1',
                        number=number, patchset=1, branch_name='master')
        change.files = sorted(files) if files else ['README.rst']
        return change

    def merged(self, item: m.QueueItem, files: dict | None) -> None:
        """What the merger returns for ``item``: the config files as the
        speculative merge left them."""
        bs = item.current_build_set
        bs.merge_state = m.MERGE_COMPLETE
        if files:
            project = item.change.project
            tree = dict(self.repos.get(project, {}))
            tree.update({p: textwrap.dedent(t) for p, t in files.items()})
            bs.read_files = [ProjectFiles('gerrit', project, 'master', tree)]

    def freeze(self, pipeline: str, item: m.QueueItem):
        """(JobRefs, errors) exactly as the scheduler freezes ``item``."""
        return self.layouts.freeze_jobs(self.layout, self.pipeline(pipeline), item)


class SpeculativeCollaborators(Collaborators):
    """The manager harness, freezing through the scheduler's layouts;
    ``proposals`` maps change numbers to the config files they change."""

    def __init__(self, tenant: SpeculativeTenant, proposals: dict, **kw):
        super().__init__(**kw)
        self.tenant = tenant
        self.proposals = proposals

    def freeze_jobs(self, pipeline, item):
        files = self.proposals.get(item.change.number)
        self.tenant.merged(item, files)
        return self.tenant.layouts.freeze_jobs(self.tenant.layout, pipeline, item)


def setup_manager(tenant: SpeculativeTenant, pipeline: str, proposals: dict):
    ctx = SpeculativeCollaborators(tenant, proposals)
    ctx.manager = manager_for(tenant.pipeline(pipeline), ctx)
    return ctx, ctx.manager


def enqueue(tenant: SpeculativeTenant, ctx, project: str, number: int):
    change = tenant.change(project, number, ctx.proposals.get(number))
    ctx.changes[number] = change
    return ctx.manager.add_change(change)
