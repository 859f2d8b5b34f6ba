"""``- pipeline:`` stanzas.

The pipeline's own attributes are validated here; everything under
``trigger``, ``require``, ``reject`` and the reporter actions is keyed by
connection name and validated with the schema that connection's driver
provides (zuul/driver/registry.py), so no driver's keys are known here."""

from __future__ import annotations

import voluptuous as vs

from zuul.configloader.schema import as_list, line_of, scalar_or_list, validate
from zuul.model.errors import ConfigurationError, SourceContext
from zuul.model.pipeline import (
    MANAGERS,
    REPORTER_ACTION_ALIASES,
    REPORTER_ACTIONS,
    BatchingConfig,
    PipelineConfig,
)

WINDOW_TYPE = vs.Any('linear', 'exponential')
_connections = vs.Any(None, {str: object})

PIPELINE_SCHEMA = vs.Schema({
    vs.Required('name'): str,
    vs.Required('manager'): vs.Any(*MANAGERS),
    'precedence': vs.Any('low', 'normal', 'high'),
    'description': str,
    'success-message': str, 'failure-message': str,
    'merge-failure-message': str, 'merge-conflict-message': str,
    'no-jobs-message': str, 'footer-message': str, 'start-message': str,
    'enqueue-message': str, 'dequeue-message': str,
    'dequeue-on-new-patchset': bool,
    'ignore-dependencies': bool,
    'post-review': bool,
    'allow-secrets': bool,
    'allow-other-connections': bool,
    'disable-after-consecutive-failures': vs.All(int, vs.Range(min=1)),
    'window': vs.All(int, vs.Range(min=0)),
    'window-floor': vs.All(int, vs.Range(min=1)),
    'window-ceiling': vs.All(int, vs.Range(min=1)),
    'window-increase-type': WINDOW_TYPE,
    'window-increase-factor': vs.All(int, vs.Range(min=1)),
    'window-decrease-type': WINDOW_TYPE,
    'window-decrease-factor': vs.All(int, vs.Range(min=1)),
    'supercedes': scalar_or_list(str),
    'batching': vs.Any(None, {'max': vs.All(int, vs.Range(min=1)), 'adaptive': bool,
                              'bisect': vs.Any('halves', 'parallel')}),
    'trigger': _connections,
    'require': _connections,
    'reject': _connections,
    **{action: _connections for action in REPORTER_ACTIONS + tuple(REPORTER_ACTION_ALIASES)},
})

# yaml key -> PipelineConfig attribute, for plain values.
_SIMPLE = {
    'manager': 'manager', 'precedence': 'precedence', 'description': 'description',
    'success-message': 'success_message', 'failure-message': 'failure_message',
    'merge-failure-message': 'merge_failure_message',
    'merge-conflict-message': 'merge_failure_message',
    'no-jobs-message': 'no_jobs_message', 'footer-message': 'footer_message',
    'start-message': 'start_message', 'enqueue-message': 'enqueue_message',
    'dequeue-message': 'dequeue_message',
    'dequeue-on-new-patchset': 'dequeue_on_new_patchset',
    'ignore-dependencies': 'ignore_dependencies', 'post-review': 'post_review',
    'allow-secrets': 'allow_secrets', 'allow-other-connections': 'allow_other_connections',
    'disable-after-consecutive-failures': 'disable_after_consecutive_failures',
    'window': 'window', 'window-floor': 'window_floor', 'window-ceiling': 'window_ceiling',
    'window-increase-type': 'window_increase_type',
    'window-increase-factor': 'window_increase_factor',
    'window-decrease-type': 'window_decrease_type',
    'window-decrease-factor': 'window_decrease_factor',
}


class PipelineParser:
    """Builds PipelineConfig objects.

    A connection (or driver) the system does not have is not fatal: the
    pipeline is kept without that connection's entries so projects naming
    the pipeline still load, and the problem is reported in
    ``self.problems`` (reasons naming the pipeline and connection) for the
    loader to record as configuration errors."""

    def __init__(self, context):
        self.context = context
        self.problems: list[str] = []

    def parse(self, conf, source_context: SourceContext) -> PipelineConfig:
        self.problems = []
        validate(PIPELINE_SCHEMA, dict(conf))
        pipeline = PipelineConfig(name=conf['name'], source_context=source_context,
                                  start_line=line_of(conf))
        for key, attr in _SIMPLE.items():
            if key in conf:
                setattr(pipeline, attr, conf[key])
        pipeline.supercedes = as_list(conf.get('supercedes'))
        if pipeline.manager == 'serial':
            pipeline.window = conf.get('window', 1)
        self._check_window(pipeline)
        pipeline.batching = self._batching(pipeline, conf)
        self._triggers(pipeline, conf.get('trigger') or {})
        for key, attr in (('require', 'require'), ('reject', 'reject')):
            getattr(pipeline, attr).update(self._requirements(pipeline, key,
                                                              conf.get(key) or {}))
        for action in REPORTER_ACTIONS + tuple(REPORTER_ACTION_ALIASES):
            if conf.get(action):
                canonical = REPORTER_ACTION_ALIASES.get(action, action)
                pipeline.reporters.setdefault(canonical, {}).update(
                    self._reporters(pipeline, action, conf[action]))
        return pipeline

    @staticmethod
    def _check_window(p: PipelineConfig) -> None:
        if p.window_ceiling is not None and p.window_floor > p.window_ceiling:
            raise ConfigurationError(f'window-floor ({p.window_floor}) is greater than '
                                     f'window-ceiling ({p.window_ceiling})')

    @staticmethod
    def _batching(p: PipelineConfig, conf) -> BatchingConfig | None:
        """``batching`` (beyond released Zuul; zuul/manager/batching.py):
        only for a dependent pipeline."""
        if 'batching' not in conf:
            return None
        if p.manager != 'dependent':
            raise ConfigurationError(f'batching: only a dependent pipeline can batch '
                                     f'changes (this one is {p.manager})')
        return BatchingConfig(**(conf['batching'] or {}))

    def _driver(self, pipeline: PipelineConfig, section: str, connection: str,
                interface: str):
        """The driver for ``connection`` if it has ``interface`` (e.g.
        'get_trigger_schema'); None (with a recorded problem) otherwise."""
        driver_name, driver = self.context.driver_for(connection)
        if driver is None:
            if self.context.connections is not None and connection in \
                    self.context.connections:
                what = f'connection "{connection}" uses the driver "{driver_name}", ' \
                    'which this system does not have'
            else:
                what = f'no connection or driver named "{connection}" is available'
            self.problems.append(f'{section}: {what}; its "{connection}" {section} '
                                 'entries are ignored')
            return None
        pipeline.connection_drivers[connection] = driver_name
        if not hasattr(driver, interface) or getattr(driver, interface)() is None:
            raise ConfigurationError(f'{section}: the driver "{driver_name}" of connection '
                                     f'"{connection}" cannot be used in "{section}"')
        return driver

    def _triggers(self, pipeline: PipelineConfig, conf: dict) -> None:
        for connection, value in conf.items():
            driver = self._driver(pipeline, 'trigger', connection, 'get_trigger_schema')
            if driver is not None:
                value = validate(driver.get_trigger_schema(), value,
                                 f'trigger.{connection}')
                pipeline.triggers[connection] = list(value)

    def _requirements(self, pipeline: PipelineConfig, key: str, conf: dict) -> dict:
        method = f'get_{key}_schema'
        out = {}
        for connection, value in conf.items():
            driver = self._driver(pipeline, key, connection, method)
            if driver is not None:
                out[connection] = validate(getattr(driver, method)(), value or {},
                                           f'{key}.{connection}')
        return out

    def _reporters(self, pipeline: PipelineConfig, action: str, conf: dict) -> dict:
        out = {}
        for connection, value in conf.items():
            driver = self._driver(pipeline, action, connection, 'get_reporter_schema')
            if driver is not None:
                out[connection] = validate(driver.get_reporter_schema(), value,
                                           f'{action}.{connection}')
        return out
