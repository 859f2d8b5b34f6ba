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
