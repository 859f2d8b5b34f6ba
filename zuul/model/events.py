"""Events the scheduler consumes: triggers from connections, management
requests (CLI/web), and results from mergers, nodepool and executors."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field

# Event types saying a branch or tag moved (Gerrit's and git's
# ref-updated, GitLab's gl_push): the configuration on it may have changed.
# Events saying a branch (or tag) moved: Gerrit's ref-updated, GitHub's
# push, GitLab's gl_push.
REF_UPDATE_EVENTS = frozenset({'ref-updated', 'push', 'gl_push'})


def new_event_id() -> str:
    return uuid.uuid4().hex[:16]


@dataclass
class TriggerEvent:
    """A normalized event from a connection (Gerrit stream-events, a git
    poll, a timer, Zuul itself). Drivers fill in what they have."""

    type: str
    connection: str = ''
    project: str = ''
    branch: str | None = None
    ref: str | None = None
    oldrev: str | None = None
    newrev: str | None = None
    change_number: int | None = None
    patchset: int | None = None
    change_url: str | None = None
    approvals: list[dict] = field(default_factory=list)
    comment: str | None = None
    account: dict = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)
    event_id: str = field(default_factory=new_event_id)
    forced_pipeline: str | None = None
    timespec: str | None = None
    pipeline: str | None = None  # zuul driver events name their pipeline
    hashtags: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    # GitHub: the webhook's action (opened, changed, comment, labeled,
    # status, submitted, rerequested ...), the label added or removed,
    # a review's state, ``user:context:state`` of a commit status and
    # ``app:name:conclusion`` of a check run.
    action: str | None = None
    label: str | None = None
    review_state: str | None = None
    status: str | None = None
    check: str | None = None
    data: dict | None = None  # the raw payload, for logs
    # The change as its source read it when the event arrived (a Gerrit
    # query row), so whichever scheduler takes the event need not ask the
    # source again on its loop; {} when it was read and not found.
    change_data: dict | None = None
    # The changes it needs (git parent, Depends-On), read with it: query
    # rows, in order; None when not read ahead.
    needed_data: list | None = None

    @property
    def is_change_event(self) -> bool:
        return self.change_number is not None

    def describe(self) -> str:
        what = f'{self.change_number},{self.patchset}' if self.is_change_event \
            else (self.ref or '')
        return f'{self.type} {self.connection} {self.project} {what}'.strip()


class ManagementEvent:
    """A request (enqueue, dequeue, promote, reconfigure...) whose caller
    waits for the outcome."""

    def __init__(self, kind: str, **args):
        self.kind = kind
        self.args = args
        self.event_id = new_event_id()
        self._done = threading.Event()
        self.result = None
        self.exception: Exception | None = None

    def done(self, result=None, exception: Exception | None = None) -> None:
        self.result = result
        self.exception = exception
        self._done.set()

    def wait(self, timeout: float | None = None):
        if not self._done.wait(timeout):
            raise TimeoutError(f'{self.kind} not processed within {timeout}s')
        if self.exception is not None:
            raise self.exception
        return self.result


@dataclass
class ResultEvent:
    """A result coming back to the scheduler thread: ``kind`` is one of
    merge-completed, nodes-provisioned, build-started, build-completed,
    build-paused; ``args`` carries the objects."""

    kind: str
    args: dict = field(default_factory=dict)
