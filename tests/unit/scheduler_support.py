"""A real Scheduler, its pipeline managers and Layouts in one process,
for tests of configuration keys that act in the scheduler: the merger,
the executor's Gearman client and the config reader are stand-ins that
serve files from a dict and hold builds until the test ends them.

``repos`` maps ``project -> {branch: zuul.yaml text}``."""

from __future__ import annotations

import textwrap
import time
from types import SimpleNamespace

from zuul.driver.registry import default_registry
from zuul.merger.protocol import ProjectFiles
from zuul.scheduler.builds import ExecutorAdapter
from zuul.scheduler.connections import ConnectionRegistry
from zuul.scheduler.layouts import Layouts
from zuul.scheduler.scheduler import Scheduler

HOST = 'review.example.org'

# Tenant t1 with one config project, org/config.
ONE_CONFIG_PROJECT = """
- tenant:
    name: t1
    source:
      gerrit:
        config-projects: [org/config]
"""


def check_config(jobs=('unit',), reports=(), pipelines=('check',)) -> str:
    """org/config's zuul.yaml: independent ``pipelines`` without
    triggers (``reports``: actions, e.g. ``success``, reported through
    the ``reports`` stand-in, in the first pipeline), a base job,
    ``jobs`` and org/config running them in each pipeline."""
    text = ''
    for n, name in enumerate(pipelines):
        text += f'- pipeline:\n    name: {name}\n    manager: independent\n    trigger: {{}}\n'
        for action in reports if n == 0 else ():
            text += f'    {action}:\n      reports: {{}}\n'
    text += '- job:\n    name: base\n    parent: null\n'
    for job in jobs:
        text += f'- job:\n    name: {job}\n'
    text += '- project:\n'
    for name in pipelines:
        text += f'    {name}:\n      jobs: [{", ".join(jobs)}]\n'
    return text


class DictFetcher:
    """Branches and config files, as mergers would read them."""

    def __init__(self, repos: dict):
        self.repos = repos

    def branches(self, connection, project):
        return sorted(self.repos.get(project, {'master': ''}))

    def files(self, connection, project, branch, paths):
        text = self.repos.get(project, {}).get(branch)
        return {'zuul.yaml': textwrap.dedent(text)} if text else {}


class DictMerger:
    """Every merge succeeds; like a real merger it returns the config
    files of each item's project-branch after the merge."""

    def __init__(self, fetcher: DictFetcher):
        self.fetcher = fetcher

    def merge_items(self, items, done, event_id=None, read_files=None):
        read = []
        for item in items:
            change = item.change
            if getattr(change, 'branch', None):
                read.append(ProjectFiles(change.connection, change.project, change.branch,
                                         self.fetcher.files(change.connection,
                                                            change.project,
                                                            change.branch, read_files)))
        done(SimpleNamespace(merged=True, repo_state={}, commit='a' * 40, files=[],
                             read_files=read, error=None))


class HeldExecutor:
    """executor:execute that answers only when the test finishes a build."""

    def __init__(self):
        self.running = []
        self.requests = []

    def execute(self, request, on_progress=None, on_complete=None, zone=None):
        handle = SimpleNamespace(url=None, zone=zone)
        self.running.append((request, handle, on_complete))
        self.requests.append(request)
        return handle

    def cancel(self, handle):
        pass

    def finish(self, request, result='SUCCESS'):
        for entry in list(self.running):
            if entry[0] is request:
                self.running.remove(entry)
                now = time.time()
                entry[2](entry[1], SimpleNamespace(
                    result=result, data={}, error_detail=None, start_time=now,
                    end_time=now, returned_log_url=None, log_url=None))

    def finish_all(self):
        for request, _, _ in list(self.running):
            self.finish(request)


def start_system(tmp_path, main: str, repos: dict, connections=(), history=None):
    """(scheduler, executor) over the tenant file ``main``; the caller
    stops the scheduler. ``connections`` are live connection objects
    (with ``name`` and ``driver_name``) besides the config-only
    ``gerrit``; ``history`` is the ``[database]`` BuildHistory."""
    path = tmp_path / 'main.yaml'
    path.write_text(textwrap.dedent(main))
    fetcher = DictFetcher(repos)
    registry = ConnectionRegistry(connections)
    drivers = {'gerrit': 'gerrit', **{c.name: c.driver_name for c in connections}}
    layouts = Layouts(str(path), registry, default_registry(), fetcher, drivers,
                      {'gerrit': HOST})
    executor = HeldExecutor()
    scheduler = Scheduler(layouts, registry, DictMerger(fetcher), None, None,
                          history=history)
    scheduler.executor = ExecutorAdapter(executor, scheduler, {'gerrit': HOST},
                                         layouts.job_spec_for)
    scheduler.start()
    return scheduler, executor


def enqueue_ref(scheduler, tenant, pipeline, project, branch='master'):
    scheduler.management('enqueue-ref', tenant=tenant, pipeline=pipeline, project=project,
                         ref=f'refs/heads/{branch}', oldrev='0' * 40, newrev='b' * 40)
    assert scheduler.loop.wait_idle(60)
