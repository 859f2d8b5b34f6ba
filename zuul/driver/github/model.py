"""A GitHub pull request as a pipeline change.

Its "patchset" is the head commit's SHA (a new push to the pull request is
a new patchset); pull request numbers are per repository, so its key
names the project too. ``reviews`` hold the latest review of each
reviewer (``type`` approved/changes_requested/commented/dismissed,
``username``, ``email``, ``submitted_at`` epoch seconds, ``permission``
read/write/admin); ``statuses`` are ``user:context:state`` strings of the
head commit's statuses and check runs (``app:name:conclusion``), as
released Zuul's ``status`` requirement reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zuul.driver.hosted import NumberedRequest
from zuul.model.change import Change


@dataclass(eq=False)
class PullRequest(NumberedRequest, Change):
    title: str = ''
    body: str = ''
    state: str = 'open'          # GitHub's open/closed
    merged: bool = False
    draft: bool = False
    mergeable: bool | None = None
    labels: list[str] = field(default_factory=list)
    reviews: list[dict] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    head_sha: str = ''
    updated_at: float = 0.0
    html_url: str = ''

    @property
    def is_open(self) -> bool:
        return self.state == 'open' and not self.merged

    @property
    def is_merged(self) -> bool:
        return self.merged
