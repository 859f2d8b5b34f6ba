"""``- semaphore:`` stanzas."""

from __future__ import annotations

import voluptuous as vs

from zuul.configloader.schema import line_of, validate
from zuul.model.errors import ConfigurationError, SourceContext
from zuul.model.semaphore import Semaphore

SEMAPHORE_SCHEMA = vs.Schema({vs.Required('name'): str, 'max': int})


class SemaphoreParser:
    def __init__(self, context=None):
        self.context = context

    def parse(self, conf, source_context: SourceContext) -> Semaphore:
        validate(SEMAPHORE_SCHEMA, dict(conf))
        if conf.get('max', 1) < 1:
            raise ConfigurationError('max must be at least 1')
        return Semaphore(name=conf['name'], source_context=source_context,
                         start_line=line_of(conf), max=conf.get('max', 1))
