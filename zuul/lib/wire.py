"""JSON of dataclass payloads, without copying them first.

``dataclasses.asdict`` deep-copies every list and dict of a payload before
``json.dumps`` walks it again; an execute request (variables, repository
state, nodes) costs milliseconds that way, on the scheduler's loop. Here
the JSON encoder walks the payload itself and asks for each dataclass's
fields as it meets one: the same JSON, one pass.
"""

from __future__ import annotations

import dataclasses
import json

_FIELD_NAMES: dict = {}


def field_names(cls) -> tuple:
    """The names of dataclass ``cls``'s fields, in order (cached:
    ``dataclasses.fields`` is slow)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _fields_of(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: getattr(obj, name) for name in field_names(type(obj))}
    raise TypeError(f'Object of type {type(obj).__name__} is not JSON serializable')


def dumps(payload) -> bytes:
    """UTF-8 JSON of ``payload`` (a dataclass, or data holding some), as
    ``json.dumps(dataclasses.asdict(payload))`` gives it."""
    return json.dumps(payload, default=_fields_of).encode('utf8')
