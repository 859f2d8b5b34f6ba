"""Job variants, as loaded. Nothing is inherited at load time (seed 003):
each ``- job:`` stanza (and each job entry of a project-pipeline) is one
variant holding only the attributes it sets; freezing (zuul/model/freeze.py)
combines them per queue item.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zuul.model.errors import SourceContext

# How each attribute combines when a later variant (or child) sets it.
OVERRIDE = 'override'        # scalars: the later value wins
MERGE = 'merge'              # dicts: deep merge, later wins per key
ACCUMULATE = 'accumulate'    # lists: parent's items first, then the child's
PREPEND = 'prepend'          # lists: child's items first (post-run, cleanup-run)
UNION = 'union'              # sets (tags, provides, requires)
# Once any variant applied while freezing sets it true, it stays true: a
# later variant, a project-pipeline variant or a child job in another
# project cannot turn it off (post-review guards secrets).
STICKY_TRUE = 'sticky-true'
# Every variant's list is a constraint that holds (allowed-projects,
# allowed-branches): a later variant or a child can only narrow what an
# earlier one allowed, never widen it; ``!override`` does not lift one.
# The frozen value is the tuple of every variant's list.
INTERSECT = 'intersect'

ATTRIBUTE_SEMANTICS = {
    'description': OVERRIDE, 'timeout': OVERRIDE, 'post_timeout': OVERRIDE,
    'voting': OVERRIDE, 'attempts': OVERRIDE, 'nodeset': OVERRIDE,
    'semaphores': OVERRIDE, 'ansible_version': OVERRIDE, 'ansible_split_streams': OVERRIDE,
    'workspace_scheme': OVERRIDE, 'hold_following_changes': OVERRIDE,
    'override_checkout': OVERRIDE, 'success_message': OVERRIDE,
    'failure_message': OVERRIDE, 'match_on_config_updates': OVERRIDE,
    'success_url': OVERRIDE, 'failure_url': OVERRIDE,
    'deduplicate': OVERRIDE, 'post_review': STICKY_TRUE, 'workspace': OVERRIDE,
    'allowed_projects': INTERSECT, 'allowed_branches': INTERSECT,
    'dependencies': OVERRIDE, 'image_build_name': OVERRIDE,
    'files': OVERRIDE, 'irrelevant_files': OVERRIDE, 'failure_output': OVERRIDE,
    'reuse_results': OVERRIDE,
    'run': OVERRIDE,
    'vars': MERGE, 'extra_vars': MERGE, 'host_vars': MERGE, 'group_vars': MERGE,
    'pre_run': ACCUMULATE, 'roles': ACCUMULATE, 'required_projects': ACCUMULATE,
    'include_vars': ACCUMULATE,
    'post_run': PREPEND, 'cleanup_run': PREPEND,
    'tags': UNION, 'provides': UNION, 'requires': UNION,
}

# Attributes that describe the variant itself rather than the job built.
FLAG_ATTRIBUTES = ('abstract', 'final', 'protected', 'intermediate')

DEFAULTS = {
    'voting': True, 'attempts': 3, 'timeout': None, 'post_timeout': None,
    'post_review': False, 'hold_following_changes': False,
}


@dataclass(frozen=True)
class PlaybookRef:
    """A playbook and where it comes from: the executor checks it out from
    that project/branch, and runs it trusted only from a config project."""

    path: str
    source_context: SourceContext
    roles: tuple = ()
    secrets: tuple = ()          # SecretUse, bound to this playbook
    semaphores: tuple = ()
    cleanup: bool = False        # a post-run entry's ``cleanup``: runs also when aborted

    @property
    def trusted(self) -> bool:
        return self.source_context.trusted


@dataclass(frozen=True)
class RoleRef:
    """``roles: - zuul: <project>`` (``name`` installs it under that name);
    ``galaxy`` for the seed's galaxy form (recorded, not fetched)."""

    project: str | None = None
    name: str | None = None
    galaxy: str | None = None
    connection: str | None = None


@dataclass(frozen=True)
class SecretUse:
    """A job's use of a secret: the secret's name, the variable name it is
    exposed as, and whether it is passed to the parent's playbooks."""

    name: str
    alias: str
    pass_to_parent: bool = False


@dataclass(frozen=True)
class RequiredProject:
    name: str
    override_checkout: str | None = None


@dataclass(frozen=True)
class JobDependency:
    name: str
    soft: bool = False


@dataclass(eq=False)
class Job:
    """One variant of a job."""

    name: str
    source_context: SourceContext
    start_line: int | None = None
    attributes: dict = field(default_factory=dict)
    parent: str | None = None
    parent_set: bool = False
    branch_matchers: tuple = ()      # compiled RE2 patterns
    branch_patterns: tuple = ()      # their source text
    file_matchers: tuple = ()
    irrelevant_file_matchers: tuple = ()
    project_pipeline: bool = False
    secrets: tuple = ()              # SecretUse
    abstract: bool = False
    final: bool = False
    protected: bool = False
    intermediate: bool = False

    @property
    def location(self) -> str:
        sc = self.source_context
        line = f':{self.start_line}' if self.start_line else ''
        return f'{sc.project}:{sc.branch}:{sc.path}{line}' if sc.project else \
            f'{sc.path}{line}'

    def describe(self) -> str:
        return f'job {self.name}@{self.location}'

    def get(self, attr: str, default=None):
        return self.attributes.get(attr, default)

    def sets(self, attr: str) -> bool:
        return attr in self.attributes

    def matches_branch(self, branch: str | None) -> bool:
        if not self.branch_matchers:
            return True
        if branch is None:
            return False
        return any(m.match(branch) for m in self.branch_matchers)

    def matches_files(self, files: list[str] | None) -> bool:
        """files: the job applies if any changed file matches; irrelevant-
        files: it applies unless every changed file matches. Unknown files
        (None) match."""
        if files is None:
            return True
        files = [f for f in files if f != '/COMMIT_MSG']
        if self.file_matchers:
            if not any(m.search(f) for m in self.file_matchers for f in files):
                return False
        if self.irrelevant_file_matchers and files:
            if all(any(m.search(f) for m in self.irrelevant_file_matchers) for f in files):
                return False
        return True

    def matches(self, branch: str | None, files: list[str] | None = None) -> bool:
        return self.matches_branch(branch) and self.matches_files(files)
