"""``- queue:`` stanzas (named shared queues for dependent pipelines)."""

from __future__ import annotations

import voluptuous as vs

from zuul.configloader.schema import line_of, validate
from zuul.model.errors import SourceContext
from zuul.model.queue import QueueConfig

QUEUE_SCHEMA = vs.Schema({
    vs.Required('name'): str,
    'per-branch': bool,
    'allow-circular-dependencies': bool,
    'dependencies-by-topic': bool,
})


class QueueParser:
    def __init__(self, context=None):
        self.context = context

    def parse(self, conf, source_context: SourceContext) -> QueueConfig:
        validate(QUEUE_SCHEMA, dict(conf))
        return QueueConfig(
            name=conf['name'], source_context=source_context, start_line=line_of(conf),
            per_branch=conf.get('per-branch', False),
            allow_circular_dependencies=conf.get('allow-circular-dependencies', False),
            dependencies_by_topic=conf.get('dependencies-by-topic', False))
