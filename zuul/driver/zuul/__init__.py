"""The zuul driver: events Zuul itself produces, and the ``zuul`` reporter
of the image lifecycle (seed 001)."""

from __future__ import annotations

import logging

import voluptuous as vs

from zuul.driver.base import Driver, ReporterInterface, TriggerInterface
from zuul.driver.schema_util import regex_or_list, scalar_or_list

log = logging.getLogger('zuul.driver.zuul')

IMAGE_EVENTS = ('image-build', 'image-validate', 'image-delete')
ZUUL_EVENTS = ('parent-change-enqueued', 'project-change-merged') + IMAGE_EVENTS

_trigger = vs.Schema({vs.Required('event'): scalar_or_list(vs.Any(*ZUUL_EVENTS)),
                      'pipeline': regex_or_list(), 'image': regex_or_list()})

# ``success: zuul: {image-built: true, image-validated: true}``
_reporter = vs.Schema({'image-built': bool, 'image-validated': bool})


class ZuulDriver(Driver, TriggerInterface, ReporterInterface):
    name = 'zuul'
    #: Its reporter needs no zuul.conf connection (there is none named
    #: ``zuul``): zuul/scheduler/layouts.py builds it anyway.
    reports_without_connection = True

    def __init__(self):
        #: zuul.scheduler.images.ImageService, set when the scheduler
        #: starts it; without one the reporter only logs.
        self.image_service = None

    def get_trigger_schema(self):
        return scalar_or_list(_trigger)

    def get_trigger(self, connection, config):
        entries = config if isinstance(config, list) else [config]
        return [ZuulEventFilter(e) for e in entries]

    def get_reporter_schema(self):
        return _reporter

    def get_reporter(self, connection, pipeline, config):
        return ZuulReporter(self, dict(config or {}))


class ZuulEventFilter:
    """Matches events Zuul itself emits: ``parent-change-enqueued`` (a
    change this one depends on entered ``pipeline``),
    ``project-change-merged`` (another change of its project merged) and
    the image events ``image-build``, ``image-validate`` and
    ``image-delete`` (of an image whose name matches ``image``, if given)."""

    def __init__(self, conf: dict):
        from zuul.lib.regex import compile_regex
        events = conf['event']
        self.types = set(events if isinstance(events, list) else [events])
        pipelines = conf.get('pipeline')
        if pipelines is not None and not isinstance(pipelines, list):
            pipelines = [pipelines]
        self.pipelines = [compile_regex(p, trusted=True)[0] for p in pipelines or ()]
        images = conf.get('image')
        if images is not None and not isinstance(images, list):
            images = [images]
        self.images = [compile_regex(p, trusted=True)[0] for p in images or ()]

    def wants_image_event(self, event_type: str, image_name: str) -> bool:
        if event_type not in self.types:
            return False
        return not self.images or any(p.fullmatch(image_name) for p in self.images)

    def matches_event(self, event) -> bool:
        return event.type in self.types

    def matches(self, event, change=None) -> bool:
        if event.type not in self.types:
            return False
        if self.pipelines and event.type == 'parent-change-enqueued':
            return any(p.fullmatch(event.pipeline or '') for p in self.pipelines)
        if event.type in IMAGE_EVENTS:
            info = (getattr(event, 'data', None) or {}).get('image') or {}
            return self.wants_image_event(event.type, info.get('name') or '')
        return True


class ZuulReporter:
    """``image-built: true``: record the image builds whose artifacts the
    item's jobs returned (``metadata: {type: zuul_image, image_name,
    format}``), with an upload record per provider using the image,
    validated as ``image-validated`` says.  ``image-validated: true`` on
    an image-validate item: the upload under test goes into service."""

    def __init__(self, driver: ZuulDriver, config: dict):
        self.driver = driver
        self.config = config

    def report(self, item, pipeline, action, message):
        service = self.driver.image_service
        if service is None:
            log.warning('zuul reporter (%s) for %s: this scheduler runs no image service',
                        action, getattr(item.change, 'describe', lambda: '?')())
            return
        service.report(item, pipeline, action, self.config)
