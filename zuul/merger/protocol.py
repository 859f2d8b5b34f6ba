"""Gearman wire contract between the scheduler (MergeClient) and mergers.

Function names and their payloads (JSON, one dataclass each way):

* ``merger:merge`` -- :class:`MergeRequest` -> :class:`MergeResult`.
  Merge a list of items in order onto their branches (each with its
  project's merge mode) and report the branch heads the merge started
  from, the resulting commit of every project-branch, or which item did
  not merge.
* ``merger:cat`` -- :class:`CatRequest` -> :class:`CatResult`.  Read files
  (and every file under directories such as ``zuul.d/``) from a branch.
* ``merger:refstate`` -- :class:`RefStateRequest` -> :class:`RefStateResult`.
  The current heads of every branch of the items' projects, no merging.
* ``merger:fileschanges`` -- :class:`FilesChangesRequest` ->
  :class:`FilesChangesResult`.  The files a change touches.

Failures a merger can explain (a conflict, a project it cannot fetch)
come back in the result (``error``, ``conflict``) with WORK_COMPLETE;
WORK_FAIL only means the request itself could not be decoded.  Every
payload carries ``version``: a peer speaking another version is refused
loudly (:class:`ProtocolVersionError`) rather than misread.

``repo_state`` everywhere has the shape
``{connection: {project: {'refs/heads/<branch>': sha, ...}}}`` and lists
every branch of each project it names.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from zuul.lib import wire

SCHEMA_VERSION = 1

FUNCTION_MERGE = 'merger:merge'
FUNCTION_CAT = 'merger:cat'
FUNCTION_REFSTATE = 'merger:refstate'
FUNCTION_FILES_CHANGES = 'merger:fileschanges'
FUNCTIONS = (FUNCTION_MERGE, FUNCTION_CAT, FUNCTION_REFSTATE, FUNCTION_FILES_CHANGES)

MERGE_MODES = ('merge', 'merge-resolve', 'cherry-pick', 'squash-merge', 'rebase')
DEFAULT_MERGE_MODE = 'merge-resolve'

# The in-repo configuration locations, for CatRequest.files and
# MergeRequest.read_files (a trailing "/" means "every file under it").
CONFIG_FILES = ('zuul.yaml', 'zuul.d/', '.zuul.yaml', '.zuul.d/')


class ProtocolVersionError(ValueError):
    """A payload written with another schema version."""


class _Payload:
    """to_dict/from_dict/to_json/from_json for the dataclasses below.

    ``_nested`` maps a field name to (type, 'one'|'list') for fields that
    hold other payload dataclasses.  Unknown keys from a newer peer are
    ignored (additive changes keep the version); a missing or different
    ``version`` on a top-level payload is refused.
    """

    _nested: dict = {}
    _versioned = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict):
        if not isinstance(data, dict):
            raise ValueError(f'{cls.__name__}: expected an object, got {type(data).__name__}')
        if cls._versioned and data.get('version') != SCHEMA_VERSION:
            raise ProtocolVersionError(
                f'merger payload version {data.get("version")!r}, expected {SCHEMA_VERSION}')
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in data.items():
            if key not in names:
                continue
            nested = cls._nested.get(key)
            if nested and value is not None:
                typ, kind = nested
                if kind == 'list':
                    value = [typ.from_dict(v) for v in value]
                else:
                    value = typ.from_dict(value)
            kwargs[key] = value
        return cls(**kwargs)

    def to_json(self) -> bytes:
        return wire.dumps(self)

    @classmethod
    def from_json(cls, raw: bytes | str):
        """Decode; raises ValueError (ProtocolVersionError, bad JSON, wrong
        shape) or TypeError (missing required fields)."""
        if isinstance(raw, bytes):
            raw = raw.decode('utf8')
        return cls.from_dict(json.loads(raw))


@dataclass
class MergeItem(_Payload):
    """One queue item to merge (or, without ``number``, a ref to record).

    ``ref`` is what to fetch for a change (``refs/changes/NN/N/P``);
    ``branch`` is the branch it merges onto; ``merge_mode`` is the
    project's (one of MERGE_MODES).  Items without ``number`` (ref-updated,
    periodic) are not merged: their project's branch heads are recorded
    and ``newrev`` (when set) is their commit.
    """

    connection: str
    project: str
    branch: str | None = None
    ref: str | None = None
    number: int | str | None = None
    patchset: int | str | None = None
    merge_mode: str = DEFAULT_MERGE_MODE
    oldrev: str | None = None
    newrev: str | None = None

    @property
    def is_change(self) -> bool:
        return self.number is not None and bool(self.ref)

    def describe(self) -> str:
        if self.number is not None:
            return f'{self.project} change {self.number},{self.patchset}'
        return f'{self.project} {self.ref or self.branch}'


@dataclass
class ProjectFiles(_Payload):
    """File contents of one project-branch (path -> text)."""

    connection: str
    project: str
    branch: str
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class MergeRequest(_Payload):
    """The argument of ``merger:merge``.

    ``repo_state`` (optional) pins the branch heads to start from (the
    state recorded by an earlier merge); without it the merger fetches
    the current heads.  ``read_files`` lists paths (``dir/`` for every
    file under a directory) to read from every touched project-branch
    after merging, for speculative layouts.  ``files_changed`` asks for
    the files the last item's change touches.
    """

    items: list[MergeItem]
    repo_state: dict[str, Any] | None = None
    read_files: list[str] = field(default_factory=list)
    files_changed: bool = True
    event_id: str | None = None
    version: int = SCHEMA_VERSION

    _nested = {'items': (MergeItem, 'list')}
    _versioned = True


@dataclass
class MergeResult(_Payload):
    """The WORK_COMPLETE of ``merger:merge``.

    ``repo_state`` is the state the merge STARTED from (every branch of
    every touched project, before any item was merged): executors are
    given it and re-merge the same items on top, getting the same commits
    (merges are reproducible).  ``merged_state`` is the state after the
    merge (same shape; touched branches at their speculative commits).
    ``commit`` is the resulting commit of the last item's branch.  When
    ``merged`` is false, ``conflict`` is the item that did not merge, or
    ``error`` says what failed (e.g. a project that cannot be fetched).
    ``files`` lists the files the last item's change touches (None when
    not asked for or not a change).
    """

    merged: bool
    conflict: MergeItem | None = None
    error: str | None = None
    repo_state: dict[str, Any] = field(default_factory=dict)
    merged_state: dict[str, Any] = field(default_factory=dict)
    commit: str | None = None
    files: list[str] | None = None
    read_files: list[ProjectFiles] = field(default_factory=list)
    event_id: str | None = None
    version: int = SCHEMA_VERSION

    _nested = {'conflict': (MergeItem, 'one'), 'read_files': (ProjectFiles, 'list')}
    _versioned = True


@dataclass
class CatRequest(_Payload):
    """The argument of ``merger:cat``: read ``files`` from the current
    head of ``branch`` (an entry ending in ``/`` reads every file under
    that directory, recursively)."""

    connection: str
    project: str
    branch: str
    files: list[str] = field(default_factory=list)
    event_id: str | None = None
    version: int = SCHEMA_VERSION

    _versioned = True


@dataclass
class CatResult(_Payload):
    """``files``: path -> text for every file found (missing ones are
    absent); ``commit`` is the branch head they were read from."""

    files: dict[str, str] = field(default_factory=dict)
    commit: str | None = None
    error: str | None = None
    event_id: str | None = None
    version: int = SCHEMA_VERSION

    _versioned = True


@dataclass
class RefStateRequest(_Payload):
    """The argument of ``merger:refstate``: record the current branch
    heads of the items' projects (nothing is merged)."""

    items: list[MergeItem]
    event_id: str | None = None
    version: int = SCHEMA_VERSION

    _nested = {'items': (MergeItem, 'list')}
    _versioned = True


@dataclass
class RefStateResult(_Payload):
    """``updated`` is false when a project could not be fetched (``error``)."""

    updated: bool
    repo_state: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    event_id: str | None = None
    version: int = SCHEMA_VERSION

    _versioned = True


@dataclass
class FilesChangesRequest(_Payload):
    """The argument of ``merger:fileschanges``: the files touched by the
    commits of ``tosha`` (a ref such as ``refs/changes/..`` or a sha) that
    are not on ``branch``."""

    connection: str
    project: str
    branch: str
    tosha: str
    event_id: str | None = None
    version: int = SCHEMA_VERSION

    _versioned = True


@dataclass
class FilesChangesResult(_Payload):
    """``files`` is None when the change could not be fetched (``error``)."""

    files: list[str] | None = None
    error: str | None = None
    event_id: str | None = None
    version: int = SCHEMA_VERSION

    _versioned = True
