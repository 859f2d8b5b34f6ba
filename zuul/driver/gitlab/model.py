"""A GitLab merge request as a pipeline change.

Its "patchset" is the head commit's SHA (a push to the source branch is
a new patchset); merge request numbers (``iid``) are per project, so its
key names the project too. ``approved`` is GitLab's ``approved`` with at
least one approver (``approved_by``: their user names); ``labels`` are
label names; ``merge_status`` is GitLab's (``can_be_merged``,
``cannot_be_merged``, ``unchecked`` ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zuul.driver.hosted import NumberedRequest
from zuul.model.change import Change


@dataclass(eq=False)
class MergeRequest(NumberedRequest, Change):
    title: str = ''
    description: str = ''
    state: str = 'opened'         # GitLab's opened/closed/merged/locked
    labels: list[str] = field(default_factory=list)
    approved: bool = False
    approved_by: list[str] = field(default_factory=list)
    source_branch: str = ''
    merge_status: str = ''
    draft: bool = False
    updated_at: float = 0.0
    web_url: str = ''

    @property
    def is_open(self) -> bool:
        return self.state == 'opened'

    @property
    def is_merged(self) -> bool:
        return self.state == 'merged'
