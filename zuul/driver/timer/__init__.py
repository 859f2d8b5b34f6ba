"""The timer driver: cron-style periodic triggers (croniter)."""

from __future__ import annotations

import croniter
import voluptuous as vs

from zuul.driver.base import Driver, TriggerInterface
from zuul.driver.schema_util import scalar_or_list


def parse_timespec(spec: str) -> tuple[str, int]:
    """'min hour dom mon dow [second] [jitter]' -> (cron, jitter).

    Zuul's optional sixth field is a cron seconds field and the seventh a
    random jitter in seconds; croniter validates the cron part (with its
    seconds field when given)."""
    parts = str(spec).split()
    if len(parts) < 5 or len(parts) > 7:
        raise vs.Invalid(f'"{spec}" is not a cron time (5 fields, optional seconds and '
                         'jitter)')
    cron = ' '.join(parts[:6])
    if not croniter.croniter.is_valid(cron):
        raise vs.Invalid(f'"{spec}" is not a valid cron time')
    jitter = 0
    if len(parts) == 7:
        try:
            jitter = int(parts[6])
        except ValueError:
            raise vs.Invalid(f'"{spec}": the jitter must be a number of seconds') from None
    return cron, jitter


def _timespec(value):
    parse_timespec(value)
    return value


_trigger = vs.Schema({vs.Required('time'): _timespec, 'jitter': int})


class TimerDriver(Driver, TriggerInterface):
    name = 'timer'

    def get_trigger_schema(self):
        return scalar_or_list(_trigger)

    def get_trigger(self, connection, config):
        entries = config if isinstance(config, list) else [config]
        return [TimerEventFilter(e['time']) for e in entries]


class TimerEventFilter:
    """Matches the timer events fired for this pipeline's ``time``.
    ``pipeline_name`` is set by the scheduler when it builds the
    pipeline's triggers (zuul/scheduler/layouts.py)."""

    def __init__(self, timespec: str):
        self.timespec = timespec
        self.pipeline_name: str | None = None

    def matches_event(self, event) -> bool:
        """Only timer events can match (the change is never needed)."""
        return event.type == 'timer'

    def matches(self, event, change=None) -> bool:
        if event.type != 'timer' or event.timespec != self.timespec:
            return False
        return event.forced_pipeline is None or self.pipeline_name is None or \
            event.forced_pipeline == self.pipeline_name
