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
