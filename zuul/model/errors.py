"""Configuration errors: every one names the file, the line, the object and
the reason, so a user can go straight to what is wrong."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SourceContext:
    """Where a piece of configuration came from."""

    project: str = ''
    branch: str = ''
    path: str = ''
    trusted: bool = False
    connection: str = ''
    # Set by the layout loader: True when jobs and project-pipelines
    # defined here should match only ``branch`` (an untrusted project with
    # several branches, unless a pragma or tenant option turns it off).
    implicit_branch_matcher: bool = False
    canonical_hostname: str = ''
    # From a ``pragma: implied-branches``: the branch patterns jobs and
    # project-pipelines here match when they name none themselves.
    implied_branches: tuple = ()

    def __str__(self) -> str:
        where = self.path
        if self.project:
            where = f'{self.project}:{self.branch}:{self.path}' if self.branch \
                else f'{self.project}:{self.path}'
        return where


@dataclass
class ConfigError:
    """One error in one configuration object."""

    reason: str
    path: str = ''
    line: int | None = None
    object_type: str = ''
    object_name: str = ''
    project: str = ''
    branch: str = ''
    severity: str = 'error'

    def location(self) -> str:
        loc = self.path or '<unknown>'
        if self.line is not None:
            loc = f'{loc}:{self.line}'
        return loc

    def __str__(self) -> str:
        what = self.object_type
        if self.object_name:
            what = f'{what} "{self.object_name}"' if what else f'"{self.object_name}"'
        prefix = f'{self.location()}: '
        if what:
            prefix += f'in {what}: '
        return prefix + self.reason

    def to_dict(self) -> dict:
        return {
            'reason': self.reason, 'path': self.path, 'line': self.line,
            'object_type': self.object_type, 'object_name': self.object_name,
            'project': self.project, 'branch': self.branch,
            'severity': self.severity,
        }


@dataclass
class ConfigErrorList:
    """An ordered collection of errors found while loading a layout."""

    errors: list[ConfigError] = field(default_factory=list)

    def add(self, error: ConfigError) -> None:
        self.errors.append(error)

    def extend(self, errors) -> None:
        self.errors.extend(errors)

    def __iter__(self):
        return iter(self.errors)

    def __len__(self) -> int:
        return len(self.errors)

    def __bool__(self) -> bool:
        return bool(self.errors)


class ConfigurationError(Exception):
    """Raised by a parser for one object; the loader turns it into a
    ConfigError with the object's location and carries on."""

    def __init__(self, reason: str, line: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.line = line


class UnknownNameError(LookupError):
    """A management request named a tenant, pipeline, project, change or
    image that does not exist; the message says which."""
