"""Driver interfaces.

A driver is registered explicitly in a DriverRegistry (never discovered by
scanning folders). It implements whichever capability interfaces apply.
Configuration loading asks drivers for their voluptuous schemas and never
hard-codes a driver's keys.
"""

from __future__ import annotations

import abc


class Driver(abc.ABC):
    """A connection driver (gerrit, git, timer, zuul, sql, smtp, ...).

    ``name`` is the value used in zuul.conf ``driver=`` and, for drivers
    without connections (timer, zuul), as the key in pipeline triggers.
    """

    name: str = ''

    def connection_schema(self):
        """Voluptuous schema (or None) for a ``[connection NAME]`` section's
        keys; called once per connection when zuul.conf is loaded."""
        return None


class ConnectionInterface(abc.ABC):
    """Drivers with connections configured in zuul.conf."""

    @abc.abstractmethod
    def get_connection(self, name: str, config: dict):
        """Return a connection object for ``[connection name]`` with the
        given (already validated) keys. Called once per connection at
        daemon start; must not open network sockets yet."""


class TriggerInterface(abc.ABC):
    """Drivers that can start pipelines."""

    @abc.abstractmethod
    def get_trigger_schema(self):
        """Voluptuous schema for one pipeline's trigger entry for this
        driver (the value under ``trigger: <connection>:``), usually a list
        of event filter mappings. Called on every layout load."""

    def get_trigger(self, connection, config):  # pragma: no cover - later
        """Return trigger event filters built from validated config."""
        raise NotImplementedError


class ReporterInterface(abc.ABC):
    """Drivers that can report results."""

    @abc.abstractmethod
    def get_reporter_schema(self):
        """Voluptuous schema for the value under a pipeline's
        ``success:/failure:/start:/... <connection>:``."""

    def get_reporter(self, connection, pipeline, config):  # pragma: no cover
        raise NotImplementedError


class SourceInterface(abc.ABC):
    """Drivers whose connections hold git projects and changes."""

    def get_require_schema(self):
        """Voluptuous schema for pipeline ``require: <connection>:``."""
        return None

    def get_reject_schema(self):
        """Voluptuous schema for pipeline ``reject: <connection>:``."""
        return None
