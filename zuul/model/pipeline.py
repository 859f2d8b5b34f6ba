"""Pipeline configuration (``- pipeline:``), as validated.

The pipeline managers read these snake_case attributes; triggers,
requirements and reporters are kept as the validated config per
connection name, for the drivers to turn into filters and reporters."""

from __future__ import annotations

from dataclasses import dataclass, field

from zuul.model.base import ConfigObject

MANAGERS = ('independent', 'dependent', 'serial', 'supercedent')

# Reporter actions, with the spelling older configs use mapped to the
# current one.
REPORTER_ACTIONS = ('enqueue', 'start', 'success', 'failure', 'merge-conflict',
                    'no-jobs', 'disabled', 'dequeue', 'config-error', 'message')
REPORTER_ACTION_ALIASES = {'merge-failure': 'merge-conflict'}


@dataclass(frozen=True)
class BatchingConfig:
    """``batching`` of a dependent pipeline (zuul/manager/batching.py):
    up to ``max`` queued changes tested by one run, ``adaptive`` to the
    recent failure rate."""

    max: int = 8
    adaptive: bool = True
    # How a failed batch finds its culprit: 'parallel' (every change at
    # once, on top of those before it) or 'halves' (one half at a time).
    bisect: str = 'parallel'


@dataclass(eq=False)
class PipelineConfig(ConfigObject):
    manager: str = 'independent'
    precedence: str = 'normal'
    description: str | None = None
    post_review: bool = False
    allow_secrets: bool = True
    allow_other_connections: bool = True
    dequeue_on_new_patchset: bool = True
    ignore_dependencies: bool = False
    supercedes: list[str] = field(default_factory=list)
    disable_after_consecutive_failures: int | None = None
    success_message: str = 'Build succeeded.'
    failure_message: str = 'Build failed.'
    merge_failure_message: str = 'Merge Failed.\n\nThis change or one of its cross-repo ' \
        'dependencies was unable to be automatically merged with the current state of ' \
        'its repository. Please rebase the change and upload a new patchset.'
    no_jobs_message: str | None = None
    start_message: str = 'Starting {pipeline.name} jobs.'
    enqueue_message: str | None = None
    dequeue_message: str = 'Build canceled.'
    footer_message: str | None = None
    window: int = 20
    window_floor: int = 3
    window_ceiling: int | None = None
    window_increase_type: str = 'linear'
    window_increase_factor: int = 1
    window_decrease_type: str = 'exponential'
    window_decrease_factor: int = 2
    batching: BatchingConfig | None = None
    # connection name -> list of validated trigger entries
    triggers: dict[str, list] = field(default_factory=dict)
    # connection name -> validated requirement mapping
    require: dict[str, dict] = field(default_factory=dict)
    reject: dict[str, dict] = field(default_factory=dict)
    # action ('success', 'merge-conflict', ...) -> connection name -> config
    reporters: dict[str, dict] = field(default_factory=dict)
    # connection name -> driver name, for every connection mentioned
    connection_drivers: dict[str, str] = field(default_factory=dict)
    # The tenant whose layout defines it (set by the layout loader).
    tenant_name: str = ''

    @property
    def merge_conflict_message(self) -> str:
        return self.merge_failure_message

    @property
    def dependent(self) -> bool:
        return self.manager in ('dependent', 'serial')

    def reporters_for(self, action: str) -> dict:
        return self.reporters.get(REPORTER_ACTION_ALIASES.get(action, action), {})
