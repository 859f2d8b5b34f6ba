"""Gearman RPC between the scheduler and its clients (zuul CLI, zuul-web).

Function names and payloads are defined here once; both sides import
them. Every payload carries ``version``; a mismatch fails loudly.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

RPC_VERSION = 1

ENQUEUE = 'zuul:enqueue'
ENQUEUE_REF = 'zuul:enqueue_ref'
DEQUEUE = 'zuul:dequeue'
PROMOTE = 'zuul:promote'
AUTOHOLD = 'zuul:autohold'
AUTOHOLD_LIST = 'zuul:autohold_list'
STATUS_GET = 'zuul:status_get'
TENANT_LIST = 'zuul:tenant_list'
KEY_GET = 'zuul:key_get'
JOB_LIST = 'zuul:job_list'
JOB_GET = 'zuul:job_get'
PROJECT_LIST = 'zuul:project_list'
PROJECT_GET = 'zuul:project_get'
CONFIG_ERRORS = 'zuul:config_errors_list'
RECONFIGURE = 'zuul:reconfigure'

ALL_FUNCTIONS = (ENQUEUE, ENQUEUE_REF, DEQUEUE, PROMOTE, AUTOHOLD, AUTOHOLD_LIST, STATUS_GET,
                 TENANT_LIST, KEY_GET, JOB_LIST, JOB_GET, PROJECT_LIST, PROJECT_GET,
                 CONFIG_ERRORS, RECONFIGURE)


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
