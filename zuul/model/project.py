"""Project stanzas and project-templates, as loaded.

A project may have several stanzas (in several files and branches); they
are kept in load order and combined when a pipeline asks which jobs a
project runs (Layout.get_project_pipeline_config)."""

from __future__ import annotations

from dataclasses import dataclass, field

from zuul.model.base import ConfigObject

MERGE_MODES = ('merge-resolve', 'merge', 'cherry-pick', 'squash-merge', 'rebase')


@dataclass(eq=False)
class ProjectPipelineConfig:
    """What one project (or template) says about one pipeline.

    ``job_list`` holds project-pipeline Job variants (zuul/model/job.py) in
    order; ``queue_name``, ``debug`` and ``fail_fast`` are None when not set
    so that merging stanzas can tell "unset" from "false"."""

    job_list: list = field(default_factory=list)
    queue_name: str | None = None
    debug: bool | None = None
    fail_fast: bool | None = None

    def merge(self, other: ProjectPipelineConfig) -> None:
        """Add a later stanza's settings: jobs accumulate, scalars set
        later win."""
        self.job_list.extend(other.job_list)
        for attr in ('queue_name', 'debug', 'fail_fast'):
            value = getattr(other, attr)
            if value is not None:
                setattr(self, attr, value)

    @property
    def job_names(self) -> list[str]:
        seen = []
        for job in self.job_list:
            if job.name not in seen:
                seen.append(job.name)
        return seen


@dataclass(eq=False)
class ProjectConfig(ConfigObject):
    """One ``- project:`` or ``- project-template:`` stanza.

    ``name`` is the project's resolved name (or the template's name, or a
    regex starting with ``^``); ``branch_matcher`` is the one branch the
    stanza applies to when the implicit branch matcher is in effect
    (``branch_matchers`` holds compiled patterns from an
    ``implied-branches`` pragma instead)."""

    is_template: bool = False
    description: str | None = None
    templates: list[str] = field(default_factory=list)
    default_branch: str | None = None
    merge_mode: str | None = None
    queue_name: str | None = None
    variables: dict = field(default_factory=dict)
    pipelines: dict[str, ProjectPipelineConfig] = field(default_factory=dict)
    branch_matcher: str | None = None
    branch_matchers: tuple = ()

    def applies_to_branch(self, branch: str | None) -> bool:
        if branch is None:
            return True
        if self.branch_matchers:
            return any(m.match(branch) for m in self.branch_matchers)
        return self.branch_matcher is None or branch == self.branch_matcher
