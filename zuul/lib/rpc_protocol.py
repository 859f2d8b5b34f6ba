"""Gearman RPC between the scheduler and its clients (zuul CLI, zuul-web).

Function names and payloads are defined here once; both sides import
them. Every payload carries ``version``; a mismatch fails loudly.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

RPC_VERSION = 1

# Every function below takes an RPCRequest (only the fields named are
# read; the rest keep their defaults) and answers an RPCResponse whose
# ``result`` has the JSON shape given. Errors are ``ok=False`` with a
# sentence in ``error``; sentences for a name that does not exist start
# with "Unknown ..." or contain "not found" (zuul-web turns those into
# 404, anything else into 400). Names are checked in this order, so the
# first unknown one is reported: tenant, pipeline, project, job, change.
#
# source_context (used below) = {"project": str, "branch": str, "path": str}
# job variant dict (JOB_GET, PROJECT_GET) = {"name": str, "parent": str|null,
#   "description": str|null, "branches": [str], "source_context": {...},
#   "abstract": bool, "final": bool, "protected": bool, "voting": bool,
#   "timeout": int|null, "attempts": int, "nodeset": {"nodes": [{"name": str,
#   "label": str}], "groups": [...]}|str|null, "run": [str], "pre_run": [str],
#   "post_run": [str], "roles": [...], "required_projects": [str],
#   "dependencies": [str], "variables": {...}, "secrets": [str] (names only,
#   never values), "semaphores": [str], "tags": [str], "files": [str],
#   "irrelevant_files": [str]}

# tenant, pipeline, project, change ("N,P"; the project must own it).
# -> {"tenant": str, "pipeline": str, "project": str, "change": "N,P"}
ENQUEUE = 'zuul:enqueue'
# tenant, pipeline, project, ref (e.g. "refs/heads/master" or "refs/tags/v1"),
# oldrev, newrev (40 hex; oldrev defaults to 40 zeros, newrev to the ref's
# current head when omitted). -> {"tenant", "pipeline", "project", "ref"}
ENQUEUE_REF = 'zuul:enqueue_ref'
# tenant, pipeline, project, change "N,P" or ref. -> {"tenant", "pipeline",
# "project", "dequeued": "N,P"|ref}. Error "Change N,P not found in pipeline X"
# when the item is not in the pipeline.
DEQUEUE = 'zuul:dequeue'
# tenant, pipeline, changes ["N,P", ...] (all in one shared queue of the
# pipeline, moved to its head in the given order).
# -> {"tenant", "pipeline", "promoted": ["N,P", ...]}
PROMOTE = 'zuul:promote'
# tenant, project, job, change "N,P" (optional: hold only for that change)
# or ref (optional regex on the build's ref), reason, count,
# node_hold_expiration (seconds; 0 = forever). Holds the nodes of the next
# ``count`` failing builds of ``job`` (nodes go to state "hold" with
# hold_job set, so ``nodepool list`` shows them held).
# -> {"id": str, "tenant", "project", "job", "ref_filter": str, "count": int}
AUTOHOLD = 'zuul:autohold'
# tenant. -> [{"id": str, "tenant": str, "project": str, "job": str,
#   "ref_filter": str, "reason": str, "max_count": int, "current_count": int,
#   "node_hold_expiration": int, "nodes": [{"build": str, "nodes": [str]}]}]
AUTOHOLD_LIST = 'zuul:autohold_list'
# tenant, build (the request's id). Removes the hold request (nodes it
# already holds stay held). -> {"id": str, "tenant": str}; error "Unknown
# autohold request ..." when the tenant has no such request.
AUTOHOLD_DELETE = 'zuul:autohold_delete'
# (no fields). What zuul-web needs to authorize a request (it checks
# tokens itself, zuul/lib/authz.py matches claims):
# -> {"tenants": {name: {"admin_rules": [str], "access_rules": [str],
#       "authentication_realm": str|null}},
#     "rules": {rule name: [condition mapping, ...]},
#     "api_root": {"access_rules": [str], "authentication_realm": str|null}|null}
AUTH_RULES = 'zuul:auth_rules'
# tenant. -> the status JSON of zuul/scheduler/status.py tenant_status().
STATUS_GET = 'zuul:status_get'
# (no fields). -> [{"name": str, "projects": int (projects in the tenant),
#   "queue": int (items in all its pipelines)}], sorted by name.
TENANT_LIST = 'zuul:tenant_list'
# tenant, project (name or canonical name; must be in the tenant).
# -> str: the project's secrets public key, PEM ("-----BEGIN PUBLIC KEY-----").
KEY_GET = 'zuul:key_get'
# tenant. -> [{"name": str, "description": str|null, "tags": [str],
#   "variants": [{"parent": str|null, "branches": [str],
#   "source_context": {...}}]}], sorted by name.
JOB_LIST = 'zuul:job_list'
# tenant, job; optional project, branch, pipeline.
# Without project -> [job variant dict, ...] in definition order.
# With project (branch defaults to the project's default branch; pipeline
# optional: when given, the project-pipeline variant is applied too)
# -> {"job": str, "project": str, "branch": str, "pipeline": str|null,
#     "inheritance_path": [str] (one line per variant/parent applied, in
#     order, e.g. "base (config/zuul.d/jobs.yaml@master:3)"),
#     "frozen": job variant dict of the frozen result}
JOB_GET = 'zuul:job_get'
# tenant. -> [{"name": str, "canonical_name": str, "connection_name": str,
#   "type": "config"|"untrusted"}], sorted by name.
PROJECT_LIST = 'zuul:project_list'
# tenant, project. -> {"name", "canonical_name", "connection_name", "type",
#   "configs": [{"source_context": {...}, "templates": [str],
#     "default_branch": str, "merge_mode": str, "pipelines": [{"name": str,
#       "queue_name": str|null, "jobs": [[job variant dict, ...], ...]}]}]}
PROJECT_GET = 'zuul:project_get'
# tenant. -> [{"source_context": {...}|null, "line": int|null,
#   "error": str, "short_error": str}]
CONFIG_ERRORS = 'zuul:config_errors_list'
# tenant (optional: only that tenant). -> {"reconfigured": [tenant names]}
RECONFIGURE = 'zuul:reconfigure'

# Seed 001's node and image objects of the tenant's layout (names and
# references only, never settings), sorted by name. Each takes tenant.
# source_context is {...} as above, description str|null. ->
# images:    [{"name", "canonical_name", "description", "source_context",
#              "type": "cloud"|"zuul"}]
# flavors:   [{"name", "canonical_name", "description", "source_context"}]
# labels:    [{"name", "canonical_name", "description", "source_context",
#              "image": str|null, "flavor": str|null (short names),
#              "min_ready": int, "max_ready_age": int}]
# providers: [{"name", "canonical_name", "description", "source_context",
#              "section": str, "connection": str|null, "labels": [str],
#              "images": [str]} (labels/images it serves, short names)]
LAUNCHER_IMAGE_LIST = 'zuul:launcher_image_list'
LAUNCHER_FLAVOR_LIST = 'zuul:launcher_flavor_list'
LAUNCHER_LABEL_LIST = 'zuul:launcher_label_list'
LAUNCHER_PROVIDER_LIST = 'zuul:launcher_provider_list'
# function -> the Layout table it lists
LAUNCHER_LISTS = {LAUNCHER_IMAGE_LIST: 'images', LAUNCHER_FLAVOR_LIST: 'flavors',
                  LAUNCHER_LABEL_LIST: 'labels', LAUNCHER_PROVIDER_LIST: 'providers'}

# Image builds of ``type: zuul`` images (seed 001; zuul/scheduler/images.py).
# tenant, image (short name). Emits an image-build trigger event.
# -> {"tenant", "image", "event_id": str}
IMAGE_BUILD = 'zuul:image_build'
# tenant, image (optional). -> [{"uuid", "image", "image_name", "build_id",
#   "state": "building"|"ready"|"deleting", "artifacts": {format: url},
#   "validated": bool, "tenant", "pipeline", "project", "job", "build_uuid",
#   "buildset_uuid", "log_url", "created", "updated", "uploads": [upload]}]
# upload = {"uuid", "image", "build_id", "provider", "external_id": str|null,
#   "state": "pending"|"ready"|"failed"|"deleting", "validated": bool,
#   "format", "launcher", "error", "attempts", "created", "updated"}
IMAGE_BUILD_LIST = 'zuul:image_build_list'
# tenant, image (optional). -> [upload + {"image_name", "build_uuid"}]
IMAGE_UPLOAD_LIST = 'zuul:image_upload_list'
# tenant, build (a build's uuid). Marks it deleting; zuul-launcher removes
# its uploads and emits image-delete. -> {"tenant", "build", "state"}
IMAGE_DELETE = 'zuul:image_delete'
IMAGE_FUNCTIONS = (IMAGE_BUILD, IMAGE_BUILD_LIST, IMAGE_UPLOAD_LIST, IMAGE_DELETE)

ALL_FUNCTIONS = (ENQUEUE, ENQUEUE_REF, DEQUEUE, PROMOTE, AUTOHOLD, AUTOHOLD_LIST, STATUS_GET,
                 TENANT_LIST, KEY_GET, JOB_LIST, JOB_GET, PROJECT_LIST, PROJECT_GET,
                 CONFIG_ERRORS, RECONFIGURE) + tuple(LAUNCHER_LISTS) + IMAGE_FUNCTIONS

# Playbook semaphores (zuul/scheduler/semaphores.py), asked for by the
# executor around a playbook whose entry names ``semaphores``.
# tenant, build (the build's uuid), playbook (names it in the build, e.g.
# "run 0"), semaphores [str]: all of them are taken for that holder, or
# none. -> {"acquired": bool, "waiting_for": [names held elsewhere]}
SEMAPHORE_ACQUIRE = 'zuul:semaphore_acquire'
# tenant, build, playbook. -> {"released": bool (it held any)}
SEMAPHORE_RELEASE = 'zuul:semaphore_release'
SEMAPHORE_FUNCTIONS = (SEMAPHORE_ACQUIRE, SEMAPHORE_RELEASE)

# zuul-web's configuration views (zuul/scheduler/config_views.py); kept
# apart from ALL_FUNCTIONS like AUTH_FUNCTIONS below.
# tenant, pipeline, project, branch (optional: the project's default
# branch). Every job the project runs there, frozen (file matchers are
# not applied), in dependency order.
# -> [{"name": str, "dependencies": [{"name": str, "soft": bool}]}]
FREEZE_JOBS = 'zuul:freeze_jobs'
# tenant. -> [{"name": str, "global": bool, "max": int, "holders": {
#   "count": int (all holders, every tenant for a global one),
#   "this_tenant": [{"buildset_uuid": str, "job_name": str} | {"build_uuid":
#     str, "playbook": str}], "other_tenants": int}}], sorted by name.
SEMAPHORE_LIST = 'zuul:semaphore_list'
# tenant. Nodepool's nodes, without those allocated to another tenant.
# -> [{"id": str, "type": [str], "label": str, "provider": str,
#   "connection_type": str, "external_id": str|null, "state": str,
#   "state_time": float, "comment": str|null, "hold_job": str|null}]
NODE_LIST = 'zuul:node_list'
CONFIG_VIEW_FUNCTIONS = (FREEZE_JOBS, SEMAPHORE_LIST, NODE_LIST)
# tenant, project (name or canonical name; must be in the tenant).
# -> str: the project's SSH public key, one OpenSSH line ("ssh-rsa AAAA...").
PROJECT_SSH_KEY_GET = 'zuul:project_ssh_key_get'

# Functions zuul-web's authenticated actions added (kept apart from
# ALL_FUNCTIONS, which the test scheduler stand-in serves one by one).
AUTH_FUNCTIONS = (AUTOHOLD_DELETE, AUTH_RULES)


class RPCVersionError(ValueError):
    pass


class RPCError(Exception):
    """An error the scheduler reports back (unknown tenant, bad change...)."""


@dataclass
class RPCRequest:
    tenant: str | None = None
    pipeline: str | None = None
    project: str | None = None
    change: str | None = None
    changes: list[str] = field(default_factory=list)
    ref: str | None = None
    oldrev: str | None = None
    newrev: str | None = None
    job: str | None = None
    branch: str | None = None
    count: int = 1
    reason: str = ''
    node_hold_expiration: int = 86400
    image: str | None = None
    build: str | None = None
    playbook: str | None = None
    semaphores: list[str] = field(default_factory=list)
    version: int = RPC_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> RPCRequest:
        data = json.loads(text)
        check_version(data)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f'unknown request fields: {sorted(unknown)}')
        return cls(**data)


@dataclass
class RPCResponse:
    ok: bool = True
    result: object = None
    error: str | None = None
    version: int = RPC_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), default=str)

    @classmethod
    def from_json(cls, text: str | bytes) -> RPCResponse:
        data = json.loads(text)
        check_version(data)
        return cls(**data)


def check_version(data: dict) -> None:
    version = data.get('version')
    if version != RPC_VERSION:
        raise RPCVersionError(f'RPC payload version {version!r}; this side speaks '
                              f'{RPC_VERSION}: upgrade the older component')
