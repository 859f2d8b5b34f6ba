"""Repository preparation for a build, over the merger's API.

The executor reproduces the speculative state the scheduler's merger
computed: it merges the items again on top of the recorded ``repo_state``
(the exact branch commits), then checks out every project the job needs
under ``work/src`` as the job's ``workspace-scheme`` says:

* ``golang`` (default): ``src/<canonical hostname>/<project>``;
* ``flat``: ``src/<last component of the project name>``;
* ``unique``: ``src/<canonical hostname>/<first component>/<the whole
  name, URL-quoted>`` (``org%2Fproject``): never two projects in one place.
"""

from __future__ import annotations

import os
import shutil
import urllib.parse

from zuul.executor.protocol import ExecuteRequest

SCHEMES = ('golang', 'flat', 'unique')


class WorkspaceError(ValueError):
    """The job's projects cannot be laid out as its scheme says."""


def src_dir(scheme: str, canonical_hostname: str, name: str) -> str:
    """Where ``name`` is checked out, relative to the work dir
    (``zuul.projects[...].src_dir``)."""
    if scheme == 'flat':
        return os.path.join('src', name.split('/')[-1])
    if scheme == 'unique':
        return os.path.join('src', canonical_hostname, name.split('/')[0],
                            urllib.parse.quote_plus(name))
    if scheme == 'golang':
        return os.path.join('src', canonical_hostname, name)
    raise WorkspaceError(f'Unknown workspace-scheme {scheme!r} (one of {", ".join(SCHEMES)})')


class MergeConflictError(Exception):
    """An item did not merge; ``detail`` names the change."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


def _merge_item_class():
    from zuul.merger.merger import MergeItem
    return MergeItem


def branch_known(repo_state: dict, connection: str, project: str, branch: str) -> bool | None:
    """Whether ``branch`` exists in ``repo_state`` (None: project unknown)."""
    refs = (repo_state.get(connection) or {}).get(project)
    if refs is None:
        return None
    return branch in refs or f'refs/heads/{branch}' in refs


class Workspace:
    """Merges and checkouts for one build.  ``merger`` is a
    ``zuul.merger.merger.Merger`` (or anything with its two methods)."""

    def __init__(self, merger, request: ExecuteRequest):
        self.merger = merger
        self.request = request
        # The state before any item's change (what trusted content uses).
        self.base_state: dict = dict(request.repo_state or {})
        self.hostnames = dict(request.zuul.canonical_hostnames)
        for item in request.items:
            self.hostnames.setdefault(item.connection, item.canonical_hostname)

    def merge(self) -> dict:
        """The repo state with every item merged; raises MergeConflictError."""
        state = self.request.repo_state or {}
        items = [i for i in self.request.items if i.ref and i.number is not None]
        if not items:
            return state
        item_cls = getattr(self.merger, 'merge_item_class', None) or _merge_item_class()
        merge_items = [item_cls(connection=i.connection, project=i.project, branch=i.branch,
                                ref=i.ref, number=i.number, patchset=i.patchset,
                                merge_mode=i.merge_mode) for i in items]
        result = self.merger.merge_changes(merge_items, repo_state=state or None)
        if not result.merged:
            conflict = result.conflict
            if conflict is not None:
                detail = (f'Change {conflict.number},{conflict.patchset} of '
                          f'{conflict.project} does not merge')
            else:
                detail = f'Merge failed: {result.error}' if getattr(result, 'error', None) \
                    else 'Merge failed'
            raise MergeConflictError(detail)
        if not self.base_state:
            self.base_state = dict(getattr(result, 'base_state', None) or {})
        return result.repo_state

    def checkout(self, repo_state: dict, projects: list, dest_root: str) -> dict:
        """``prepare_workspace`` for ``projects`` [(conn, project, branch)]."""
        return self.merger.prepare_workspace(repo_state, projects, dest_root, self.hostnames)

    def checkout_sources(self, repo_state: dict, projects: list, work_root: str,
                         staging_root: str) -> None:
        """Check ``projects`` out into ``work_root/src`` following the
        job's ``workspace-scheme``.  The merger lays checkouts out the
        golang way: for another scheme they are made in ``staging_root``
        (same file system) and moved into place.  Raises WorkspaceError."""
        scheme = self.request.job.workspace_scheme or 'golang'
        targets: dict = {}
        for conn, project, _ in projects:
            path = src_dir(scheme, self.hostnames.get(conn, conn), project)
            if path in targets.values():
                other = next(p for p, t in targets.items() if t == path)
                raise WorkspaceError(
                    f'workspace-scheme {scheme}: projects {other[1]} and {project} would '
                    f'both be checked out at {path}')
            targets[(conn, project)] = path
        if scheme == 'golang':
            self.checkout(repo_state, projects, os.path.join(work_root, 'src'))
            return
        paths = self.checkout(repo_state, projects, staging_root)
        for key, path in paths.items():
            dest = os.path.join(work_root, targets[key])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.rename(path, dest)
        shutil.rmtree(staging_root, ignore_errors=True)

    def source_projects(self, repo_state: dict) -> list[tuple]:
        """(connection, project, branch to check out) for work/src."""
        job = self.request.job
        wanted: dict = {}
        for item in self.request.items:
            wanted.setdefault((item.connection, item.project), None)
        for rp in job.required_projects:
            wanted[(rp.connection, rp.project)] = rp.override_checkout
        item = self.request.items[-1] if self.request.items else None
        result = []
        for (conn, project), override in wanted.items():
            branch = None
            for candidate in (override, job.override_checkout, item.branch if item else None):
                if candidate and branch_known(repo_state, conn, project, candidate) is not False:
                    branch = candidate
                    break
            result.append((conn, project, branch))
        return result
