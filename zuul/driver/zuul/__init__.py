"""The zuul driver: events Zuul itself produces."""

from __future__ import annotations

import voluptuous as vs

from zuul.driver.base import Driver, TriggerInterface
from zuul.driver.schema_util import regex_or_list, scalar_or_list

ZUUL_EVENTS = ('parent-change-enqueued', 'project-change-merged', 'image-build',
               'image-validate', 'image-delete')

_trigger = vs.Schema({vs.Required('event'): scalar_or_list(vs.Any(*ZUUL_EVENTS)),
                      'pipeline': regex_or_list(), 'image': regex_or_list()})


class ZuulDriver(Driver, TriggerInterface):
    name = 'zuul'

    def get_trigger_schema(self):
        return scalar_or_list(_trigger)

    def get_trigger(self, connection, config):
        entries = config if isinstance(config, list) else [config]
        return [ZuulEventFilter(e) for e in entries]


class ZuulEventFilter:
    """Matches events Zuul itself emits: ``parent-change-enqueued`` (a
    change this one depends on entered ``pipeline``) and
    ``project-change-merged`` (another change of its project merged)."""

    def __init__(self, conf: dict):
        from zuul.lib.regex import compile_regex
        events = conf['event']
        self.types = set(events if isinstance(events, list) else [events])
        pipelines = conf.get('pipeline')
        if pipelines is not None and not isinstance(pipelines, list):
            pipelines = [pipelines]
        self.pipelines = [compile_regex(p, trusted=True)[0] for p in pipelines or ()]

    def matches(self, event, change=None) -> bool:
        if event.type not in self.types:
            return False
        if self.pipelines and event.type == 'parent-change-enqueued':
            return any(p.fullmatch(event.pipeline or '') for p in self.pipelines)
        return True
