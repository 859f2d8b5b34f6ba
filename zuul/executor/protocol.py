"""Gearman wire contract between the scheduler and the executors.

Function names:

* ``executor:execute`` -- run one build.  Argument: an :class:`ExecuteRequest`
  as JSON.  While it runs the executor sends WORK_DATA packets (a
  :class:`BuildProgress` as JSON, first with the live-log URL) and finishes
  with WORK_COMPLETE carrying a :class:`BuildResult` as JSON.  WORK_FAIL is
  only sent when the request cannot even be decoded.
* ``executor:stop:<hostname>`` -- abort a build running on that executor.
  Argument: a :class:`StopRequest` as JSON; the build then completes with
  result ``ABORTED``.

Every payload carries ``version``; a peer speaking another version is
refused loudly (:class:`ProtocolVersionError`) rather than misread.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from zuul.lib import wire

SCHEMA_VERSION = 1

FUNCTION_EXECUTE = 'executor:execute'
FUNCTION_STOP_PREFIX = 'executor:stop:'

# Results an executor can send.  RETRY means "pre-run failed or a node was
# unreachable and attempts are left": the scheduler relaunches with
# attempt + 1.  The executor itself turns the last attempt into RETRY_LIMIT.
RESULTS = ('SUCCESS', 'FAILURE', 'POST_FAILURE', 'RETRY', 'RETRY_LIMIT',
           'TIMED_OUT', 'ABORTED', 'MERGER_FAILURE', 'ERROR')


# Executor zones (released ``[executor] zone``, node attribute
# ``executor-zone``): a build on nodes of a zone is submitted as
# ``executor:execute:<zone>``, which only executors of that zone register.
NODE_ZONE_ATTRIBUTE = 'executor-zone'
_ZONE = re.compile(r'[A-Za-z0-9][A-Za-z0-9._-]{0,63}')


def valid_zone(name) -> bool:
    """A zone name fit for a Gearman function name: letters, digits,
    ``.``, ``_``, ``-`` (at most 64; no NUL, space or ``:``)."""
    return isinstance(name, str) and _ZONE.fullmatch(name) is not None


def execute_function(zone: str | None = None) -> str:
    """The Gearman function a build of ``zone`` (None: unzoned) is
    submitted as.  ValueError for a zone name that is not valid."""
    if zone is None:
        return FUNCTION_EXECUTE
    if not valid_zone(zone):
        raise ValueError(f'{zone!r} is not a valid executor zone name')
    return f'{FUNCTION_EXECUTE}:{zone}'


def node_zone(nodes) -> str | None:
    """The ``executor-zone`` attribute of a build's nodes (node record
    dicts): the first node that has one decides."""
    for node in nodes or ():
        zone = (node.get('attributes') or {}).get(NODE_ZONE_ATTRIBUTE)
        if zone is not None:
            return zone
    return None


def stop_function(hostname: str) -> str:
    """The Gearman function name that stops builds on ``hostname``."""
    return FUNCTION_STOP_PREFIX + hostname


class ProtocolVersionError(ValueError):
    """A payload written with another schema version."""


def _check_version(data: dict) -> None:
    version = data.get('version')
    if version != SCHEMA_VERSION:
        raise ProtocolVersionError(
            f'executor payload version {version!r}, expected {SCHEMA_VERSION}')


class _Wire:
    """to_dict/from_dict for a dataclass whose nested types are declared in
    ``_nested`` (field name -> (type, 'one'|'list'))."""

    _nested: dict = {}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict):
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in data.items():
            if key not in names:
                continue  # tolerate additive fields from a newer peer
            nested = cls._nested.get(key)
            if nested and value is not None:
                typ, kind = nested
                if kind == 'list':
                    value = [typ.from_dict(v) for v in value]
                else:
                    value = typ.from_dict(value)
            kwargs[key] = value
        return cls(**kwargs)


@dataclass
class RoleSpec(_Wire):
    """A ``roles: - zuul: <project>`` entry of a playbook.

    ``project`` is the project's name on its connection (``org/roles``);
    ``target_name`` is the optional ``name:`` the role is installed under.
    """

    connection: str
    project: str
    target_name: str | None = None


@dataclass
class PlaybookSpec(_Wire):
    """One playbook of a job, where it lives and what it may see.

    ``path`` is relative to the project root and may omit ``.yaml``.
    ``trusted`` is true for playbooks from config projects: those run
    unconfined.  ``secrets`` are the already decrypted secrets bound to
    this playbook (name -> value), exposed as variables.
    """

    connection: str
    project: str
    branch: str
    path: str
    trusted: bool = False
    roles: list[RoleSpec] = field(default_factory=list)
    secrets: dict[str, Any] = field(default_factory=dict)
    # A playbook entry's ``semaphores`` (held only while it runs) and
    # ``cleanup`` (a post-run playbook that runs also when the build is
    # aborted).
    semaphores: list[str] = field(default_factory=list)
    cleanup: bool = False

    _nested = {'roles': (RoleSpec, 'list')}


@dataclass
class RequiredProject(_Wire):
    """A project the job needs in ``work/src``, optionally checked out at
    ``override_checkout`` (a branch or tag) instead of the item's branch."""

    connection: str
    project: str
    override_checkout: str | None = None


@dataclass
class GroupSpec(_Wire):
    """A nodeset group: ``name`` and the node names in it."""

    name: str
    nodes: list[str] = field(default_factory=list)


# The playbook lists of a JobSpec, in the order they run.
PHASE_FIELDS = ('pre_run', 'run', 'post_run', 'cleanup_run')


@dataclass
class JobSpec(_Wire):
    """The frozen job as the executor needs it (see zuul/model/freeze.py)."""

    name: str
    voting: bool = True
    timeout: int | None = None
    post_timeout: int | None = None
    attempts: int = 3
    pre_run: list[PlaybookSpec] = field(default_factory=list)
    run: list[PlaybookSpec] = field(default_factory=list)
    post_run: list[PlaybookSpec] = field(default_factory=list)
    cleanup_run: list[PlaybookSpec] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    extra_vars: dict[str, Any] = field(default_factory=dict)
    host_vars: dict[str, dict] = field(default_factory=dict)
    group_vars: dict[str, dict] = field(default_factory=dict)
    required_projects: list[RequiredProject] = field(default_factory=list)
    override_checkout: str | None = None
    groups: list[GroupSpec] = field(default_factory=list)
    inheritance_path: list[str] = field(default_factory=list)
    # ``zuul.jobtags`` (the job's ``tags``) and ``zuul.pre_timeout``.
    tags: list[str] = field(default_factory=list)
    pre_timeout: int | None = None
    # ``failure-output`` regexes (a matching console line fails the build
    # early), ``workspace-scheme``, ``ansible-split-streams``, the
    # ``ansible-version`` in effect (job, tenant default or zuul.conf
    # default) and ``include-vars`` entries (name, project, required,
    # use-ref; ``project`` None: the job's own).
    failure_output: list[str] = field(default_factory=list)
    workspace_scheme: str = 'golang'
    ansible_split_streams: bool = False
    ansible_version: str | None = None
    include_vars: list[dict] = field(default_factory=list)

    _nested = {
        'pre_run': (PlaybookSpec, 'list'),
        'run': (PlaybookSpec, 'list'),
        'post_run': (PlaybookSpec, 'list'),
        'cleanup_run': (PlaybookSpec, 'list'),
        'required_projects': (RequiredProject, 'list'),
        'groups': (GroupSpec, 'list'),
    }


@dataclass
class NodeSpec(_Wire):
    """A locked Nodepool node, as in its ZooKeeper record.

    ``name`` is the list of nodeset node names this node answers to.
    ``host_keys`` are ``"<type> <base64>"`` strings checked by SSH;
    ``python_path`` (Nodepool's label ``python-path``) becomes
    ``ansible_python_interpreter`` unless it is ``auto``.
    """

    name: list[str]
    label: str = ''
    provider: str = ''
    region: str | None = None
    az: str | None = None
    cloud: str | None = None
    host_id: str | None = None
    id: str | None = None
    interface_ip: str | None = None
    public_ipv4: str | None = None
    private_ipv4: str | None = None
    public_ipv6: str | None = None
    connection_port: int = 22
    connection_type: str = 'ssh'
    python_path: str = 'auto'
    # None: the node record names no user; the executor's
    # ``default_username`` is used.
    username: str | None = None
    host_keys: list[str] = field(default_factory=list)
    # Kubernetes nodes (connection_type kubectl, namespace, project): the
    # node record's ``resource`` (namespace, pod, API server, CA) and its
    # credentials (``{'token': ...}``), which reach only this build's
    # kubeconfig (zuul.executor.kube) and are never printed.
    resource: dict | None = None
    secret: dict | None = field(default=None, repr=False)

    @property
    def address(self) -> str | None:
        return self.interface_ip or self.public_ipv4 or self.public_ipv6


@dataclass
class ItemSpec(_Wire):
    """A queue item (the one under test is last) whose change is merged
    speculatively.  ``ref`` is what to fetch (``refs/changes/..``);
    ``number``/``patchset`` are None for ref-updated items."""

    connection: str
    project: str
    canonical_hostname: str
    branch: str | None = None
    ref: str | None = None
    number: int | str | None = None
    patchset: int | str | None = None
    merge_mode: str = 'merge-resolve'
    change_url: str | None = None
    oldrev: str | None = None
    newrev: str | None = None
    # The commit message (plain text; the executor base64-encodes it for
    # ``zuul.message``), the change's topic, and the bundle of a cycle.
    message: str | None = None
    topic: str | None = None
    bundle_id: str | None = None


@dataclass
class ZuulContext(_Wire):
    """Build-wide facts for the ``zuul`` variable."""

    tenant: str
    pipeline: str
    buildset: str
    ref: str | None = None
    message: str | None = None
    canonical_hostnames: dict[str, str] = field(default_factory=dict)
    # The id of the event that enqueued the item, the jobs that depend on
    # this one, artifacts of the builds this one depends on (each
    # ``{project, change, patchset, job, name, url, metadata}``) and
    # whether the pipeline is post-review.
    event_id: str | None = None
    child_jobs: list[str] = field(default_factory=list)
    artifacts: list[dict] = field(default_factory=list)
    post_review: bool = False
    # Image build jobs (seed 001): ``zuul.image_build_name`` and
    # ``zuul.image_formats`` (the formats the providers using it take).
    image_build_name: str | None = None
    image_formats: list[str] = field(default_factory=list)


@dataclass
class SshKeySpec(_Wire):
    """A private key for the build's ssh-agent: the project key of a
    post-review job's project (zuul/zk/ssh_keys.py), in OpenSSH's format.
    As confidential as a secret: kept out of every repr, log and file."""

    name: str
    private_key: str = field(repr=False)


@dataclass
class ExecuteRequest(_Wire):
    """The argument of ``executor:execute``."""

    uuid: str
    job: JobSpec
    zuul: ZuulContext
    nodes: list[NodeSpec] = field(default_factory=list)
    items: list[ItemSpec] = field(default_factory=list)
    repo_state: dict[str, Any] = field(default_factory=dict)
    attempt: int = 1
    # The tenant's ``infra-failure-patterns``: a failed build whose console
    # matches one is retried (zuul.executor.infrafailure).
    infra_failure_patterns: list[str] = field(default_factory=list)
    # Keys added to the build's ssh-agent besides the node key (the
    # project key, for post-review pipelines only).
    ssh_keys: list[SshKeySpec] = field(default_factory=list, repr=False)
    version: int = SCHEMA_VERSION

    _nested = {
        'job': (JobSpec, 'one'),
        'zuul': (ZuulContext, 'one'),
        'nodes': (NodeSpec, 'list'),
        'items': (ItemSpec, 'list'),
        'ssh_keys': (SshKeySpec, 'list'),
    }

    def to_json(self) -> bytes:
        return wire.dumps(self)

    @classmethod
    def from_json(cls, raw: bytes | str) -> ExecuteRequest:
        data = json.loads(raw)
        _check_version(data)
        return cls.from_dict(data)


@dataclass
class BuildProgress(_Wire):
    """A WORK_DATA packet: where the live log is, what phase runs;
    ``pre_fail`` once the console matched the job's ``failure-output``."""

    worker_hostname: str
    url: str | None = None
    phase: str | None = None
    pre_fail: bool = False
    version: int = SCHEMA_VERSION

    def to_json(self) -> bytes:
        return wire.dumps(self)

    @classmethod
    def from_json(cls, raw: bytes | str) -> BuildProgress:
        data = json.loads(raw)
        _check_version(data)
        return cls.from_dict(data)


@dataclass
class BuildResult(_Wire):
    """The WORK_COMPLETE packet.

    ``data`` is what playbooks returned through ``zuul_return``; artifacts
    are under ``data['zuul']['artifacts']`` and child jobs to run (others
    are skipped) under ``data['zuul']['child_jobs']``, as released Zuul
    documents.  ``error_detail`` explains MERGER_FAILURE/ERROR results.
    ``log_url`` is where the executor kept the build's logs (``[executor]
    log_root`` and ``log_url``), None if it kept none; a ``log_url`` the
    playbooks returned (``data['zuul']['log_url']``) takes precedence.
    """

    result: str
    data: dict[str, Any] = field(default_factory=dict)
    error_detail: str | None = None
    attempt: int = 1
    start_time: float | None = None
    end_time: float | None = None
    log_url: str | None = None
    # Why a RETRY/RETRY_LIMIT happened (``infra:pre-run``,
    # ``infra:unreachable``, ``infra:pattern:<regex>``) or ``test`` for a
    # failure of the job itself (zuul.executor.infrafailure).
    failure_class: str | None = None
    # The speculative state the build ran on (the merger's result: branch
    # heads after every item merged) and the git identity its merge
    # commits were made with: ``zuul reproduce`` makes the same commits.
    merged_state: dict = field(default_factory=dict)
    git_user: list[str] = field(default_factory=list)
    version: int = SCHEMA_VERSION

    @property
    def artifacts(self) -> list:
        return (self.data.get('zuul') or {}).get('artifacts') or []

    @property
    def child_jobs(self) -> list | None:
        return (self.data.get('zuul') or {}).get('child_jobs')

    @property
    def returned_log_url(self) -> str | None:
        """``zuul.log_url`` from ``zuul_return`` (e.g. upload-logs roles)."""
        value = (self.data.get('zuul') or {}).get('log_url')
        return value if isinstance(value, str) and value else None

    def to_json(self) -> bytes:
        return wire.dumps(self)

    @classmethod
    def from_json(cls, raw: bytes | str) -> BuildResult:
        data = json.loads(raw)
        _check_version(data)
        return cls.from_dict(data)


@dataclass
class StopRequest(_Wire):
    """The argument of ``executor:stop:<hostname>``."""

    uuid: str
    version: int = SCHEMA_VERSION

    def to_json(self) -> bytes:
        return wire.dumps(self)

    @classmethod
    def from_json(cls, raw: bytes | str) -> StopRequest:
        data = json.loads(raw)
        _check_version(data)
        return cls.from_dict(data)
