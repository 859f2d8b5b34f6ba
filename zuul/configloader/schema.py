"""Shared helpers for the in-repo configuration parsers: the load context
given to every parser, voluptuous helpers, and error reasons that name
the attribute at fault."""

from __future__ import annotations

from dataclasses import dataclass, field

import voluptuous as vs

from zuul.lib import yamlutil
from zuul.model.errors import ConfigurationError

# Object types a tenant may include/exclude per project.
CONFIG_CLASSES = ('pipeline', 'job', 'semaphore', 'project', 'project-template',
                  'nodeset', 'secret', 'queue')


@dataclass
class LoadContext:
    """What parsers need to know about the tenant being loaded.

    ``known_projects`` maps every accepted project name (short and
    canonical) to the name projects are stored under; None means any name
    is accepted (standalone config-check). Until ``pipelines_known`` is
    set, any key of a project stanza that is not an attribute is taken as
    a pipeline name.
    ``connections`` maps connection names to driver names; None means a
    connection name equal to a registered driver's name is that driver."""

    tenant: object = None
    registry: object = None
    connections: dict | None = None
    max_job_timeout: int | None = None
    max_nodes_per_job: int | None = None
    default_parent: str = 'base'
    pipeline_names: set = field(default_factory=set)
    # True once the tenant's pipelines are loaded: project keys that are
    # not pipelines are then errors (standalone checks leave it False).
    pipelines_known: bool = False
    known_projects: dict | None = None
    # Warnings parsers met (e.g. a regex RE2 cannot compile, in trusted
    # config); the loader records them against the object being parsed.
    warnings: list = field(default_factory=list)

    def resolve_project(self, name: str) -> str | None:
        if self.known_projects is None:
            return name
        return self.known_projects.get(name)

    def driver_for(self, connection: str):
        """(driver name, driver) for a connection name; driver is None if
        the system has no such connection or driver."""
        if self.connections is not None and connection in self.connections:
            driver_name = self.connections[connection]
        else:
            driver_name = connection
        if self.registry is not None and driver_name in self.registry:
            return driver_name, self.registry.get(driver_name)
        return driver_name, None


def scalar_or_list(t):
    return vs.Any(t, [t])


def as_list(value) -> list:
    value = yamlutil.unwrap(value)
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def invalid_reason(e: vs.Invalid, prefix: str = '') -> str:
    """A one-line reason naming the attribute path at fault."""
    errors = e.errors if isinstance(e, vs.MultipleInvalid) else [e]
    reasons = []
    for err in errors:
        path = '.'.join(str(p) for p in (prefix.split('.') if prefix else []) + err.path)
        if err.msg == 'extra keys not allowed':
            reasons.append(f'unknown attribute "{path}"')
        elif err.msg.startswith('required key not provided'):
            reasons.append(f'missing required attribute "{path}"')
        else:
            reasons.append(f'{err.msg} for "{path}"' if path else err.msg)
    return '; '.join(reasons)


def validate(schema, conf, prefix: str = ''):
    """Run a voluptuous schema; raise ConfigurationError with a reason that
    names the attribute."""
    try:
        return schema(conf)
    except vs.Invalid as e:
        raise ConfigurationError(invalid_reason(e, prefix)) from None


def line_of(conf) -> int | None:
    return getattr(conf, 'start_line', None)
