"""Tenants, as main.yaml defines them."""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_CLASSES = frozenset({'pipeline', 'job', 'semaphore', 'project', 'project-template',
                         'nodeset', 'secret', 'queue', 'pragma', 'image', 'flavor',
                         'label', 'section', 'provider'})
# Node and image objects (seed 001): loaded from config projects, and from
# untrusted projects only with ``include-provider-config: true``.
PROVIDER_CLASSES = frozenset({'image', 'flavor', 'label', 'section', 'provider'})


@dataclass
class TenantProject:
    """One project in a tenant: where it lives, whether it is trusted,
    which object types its config may define."""

    connection: str
    name: str
    trusted: bool
    load_classes: frozenset = ALL_CLASSES
    shadow: tuple = ()
    exclude_unprotected_branches: bool | None = None
    exclude_locked_branches: bool | None = None
    include_branches: tuple = ()
    exclude_branches: tuple = ()
    extra_config_paths: tuple = ()
    load_branch: str | None = None
    implicit_branch_matcher: bool | None = None
    always_dynamic_branches: tuple = ()
    # Names or regexes of untrusted projects whose project stanzas this
    # project may write (``configure-projects``).
    configure_projects: tuple = ()


@dataclass
class Tenant:
    name: str
    projects: list[TenantProject] = field(default_factory=list)
    include_files: list[str] = field(default_factory=list)   # the seed's form
    max_nodes_per_job: int = 5
    max_job_timeout: int = 10800
    max_changes_per_pipeline: int | None = None   # None: no limit
    max_dependencies: int | None = None
    # Issue 21 (zuul/scheduler/classify.py): console regexes that mark a
    # failed build as an infrastructure failure (retried), and whether a
    # failed node request is retried.
    infra_failure_patterns: list = field(default_factory=list)
    retry_node_failure: bool = False
    exclude_unprotected_branches: bool = False
    exclude_locked_branches: bool = False
    default_parent: str = 'base'
    default_ansible_version: str | None = None
    allowed_triggers: list | None = None
    allowed_reporters: list | None = None
    allowed_labels: list | None = None
    disallowed_labels: list | None = None
    report_build_page: bool = False
    web_root: str | None = None
    # Names of the tenant file's authorization rules: ``admin-rules``
    # grant the web's actions (and read access), ``access-rules`` read
    # access (none: anyone may read).
    admin_rules: list = field(default_factory=list)
    access_rules: list = field(default_factory=list)
    authentication_realm: str | None = None
    use_nodepool: bool = True
    source_line: int | None = None
    # ``semaphores``: names of the tenant file's global semaphores this
    # tenant may use, and (once the whole file is read) those objects.
    semaphores: list[str] = field(default_factory=list)
    global_semaphores: dict = field(default_factory=dict)

    @property
    def config_projects(self) -> list[TenantProject]:
        return [p for p in self.projects if p.trusted]

    @property
    def untrusted_projects(self) -> list[TenantProject]:
        return [p for p in self.projects if not p.trusted]

    def get_project(self, name: str) -> TenantProject | None:
        for p in self.projects:
            if p.name == name or p.name.endswith('/' + name):
                return p
        return None


@dataclass
class TenantConfig:
    """Everything main.yaml defines."""

    path: str = ''
    tenants: dict[str, Tenant] = field(default_factory=dict)
    # ``authorization-rule``/``admin-rule`` objects: name -> conditions
    # (a list of mappings, zuul/lib/authz.py).
    admin_rules: dict[str, list] = field(default_factory=dict)
    # The ``api-root`` object: {"access_rules": [...],
    # "authentication_realm": str|None}; None when there is none.
    api_root: dict | None = None
    # ``global-semaphore`` objects by name (zuul.model.semaphore.Semaphore).
    global_semaphores: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    # Keys accepted without effect (zuul/configloader/unused.py), as
    # warnings (ConfigError, severity "warning").
    warnings: list = field(default_factory=list)
