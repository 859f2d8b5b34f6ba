"""What a pipeline item is about: a git ref, a branch tip, or a change under
review. Sources (drivers) build these; pipelines and reporters read them."""

from __future__ import annotations

from dataclasses import dataclass, field

ZERO_SHA = '0' * 40


@dataclass(eq=False)
class Ref:
    """A git ref in a project, as a ref-updated event or a timer names it."""

    connection: str
    project: str
    ref: str
    oldrev: str | None = None
    newrev: str | None = None
    url: str = ''

    @property
    def branch(self) -> str | None:
        if self.ref.startswith('refs/heads/'):
            return self.ref[len('refs/heads/'):]
        return None

    @property
    def tag(self) -> str | None:
        if self.ref.startswith('refs/tags/'):
            return self.ref[len('refs/tags/'):]
        return None

    @property
    def key(self) -> str:
        """Identity within a pipeline: two items with the same key are the
        same thing (a newer event supersedes, a duplicate is ignored)."""
        return f'{self.connection}/{self.project}/{self.ref}/{self.newrev or ""}'

    @property
    def is_deletion(self) -> bool:
        return self.newrev == ZERO_SHA

    def is_update_of(self, other) -> bool:
        return False

    def describe(self) -> str:
        short = (self.newrev or '')[:7]
        return f'{self.project} {self.ref} {short}'.strip()


@dataclass(eq=False)
class Branch(Ref):
    """A branch tip (periodic pipelines)."""

    @property
    def key(self) -> str:
        return f'{self.connection}/{self.project}/{self.ref}'


@dataclass(eq=False)
class Change(Ref):
    """A change under review with its current patchset.

    ``needs_changes`` are the keys (``connection/number``) of the changes
    this one depends on (git parent and ``Depends-On:`` footers), oldest
    first; ``needed_by`` the reverse, as far as the source knows.
    """

    number: int = 0
    patchset: int = 0
    branch_name: str = ''
    change_id: str = ''
    subject: str = ''
    message: str = ''
    owner: dict = field(default_factory=dict)
    status: str = 'NEW'
    is_current_patchset: bool = True
    approvals: list[dict] = field(default_factory=list)
    files: list[str] | None = None
    needs_changes: list[str] = field(default_factory=list)
    needed_by_changes: list[str] = field(default_factory=list)
    git_parent_changes: list[str] = field(default_factory=list)
    topic: str | None = None
    wip: bool = False
    hashtags: list[str] = field(default_factory=list)
    last_updated: int = 0

    @property
    def branch(self) -> str:
        return self.branch_name

    @property
    def key(self) -> str:
        return f'{self.connection}/{self.number}'

    @property
    def patchset_key(self) -> str:
        return f'{self.key},{self.patchset}'

    @property
    def is_open(self) -> bool:
        return self.status == 'NEW'

    @property
    def is_merged(self) -> bool:
        return self.status == 'MERGED'

    def is_update_of(self, other) -> bool:
        """True when this is a newer patchset of ``other``."""
        return isinstance(other, Change) and other.key == self.key and \
            self.patchset > other.patchset

    def approval_values(self, label: str) -> list[int]:
        return [int(a.get('value', 0)) for a in self.approvals
                if a.get('type') == label]

    def describe(self) -> str:
        return f'{self.number},{self.patchset}'
