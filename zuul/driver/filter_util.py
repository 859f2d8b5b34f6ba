"""Pieces shared by the drivers' trigger filters and requirements:
patterns (zuul/lib/regex.py: RE2, ``{regex, negate}``, a leading negative
lookahead; pipelines are trusted config, so other patterns RE2 refuses
fall back to Python's re) and the ``older-than``/``newer-than`` ages."""

from __future__ import annotations

from zuul.lib.regex import compile_regex


def as_list(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


class FilterRegex:
    """A filter pattern; ``search`` tells whether it matches the text."""

    def __init__(self, spec):
        self.regex, _ = compile_regex(spec, trusted=True)

    def search(self, text) -> bool:
        return self.regex.search(text or '')


def compile_all(values) -> list:
    return [FilterRegex(v) for v in as_list(values)]


def age_seconds(text) -> int:
    """'2d', '12h', '30m', '45s', '1w' -> seconds."""
    units = {'s': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 604800}
    text = str(text).strip()
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


class RequestRequirement:
    """``require``/``reject`` of a pull/merge request driver: as a
    requirement every given condition holds; as a rejection any given one
    rejects. Subclasses yield their ``_conditions``; ``_state`` yields
    the ``open``/``merged`` ones all of them have."""

    def __init__(self, conf: dict, reject: bool = False):
        self.reject = reject
        self.open = conf.get('open')
        self.merged = conf.get('merged')

    def _state(self, change):
        if self.open is not None:
            yield bool(getattr(change, 'is_open', False)) == self.open
        if self.merged is not None:
            yield bool(getattr(change, 'is_merged', False)) == self.merged

    def _conditions(self, change):
        yield from self._state(change)

    def matches(self, change) -> bool:
        results = list(self._conditions(change))
        if self.reject:
            return any(results)
        return all(results)
