"""Regular expressions from configuration.

Patterns are compiled with RE2 (linear time: a pattern from an untrusted
repository cannot stall the scheduler). Released configurations use two
things RE2 lacks, and both are accepted:

- ``{regex: ..., negate: true}``: matches what the regex does not;
- a leading negative lookahead, ``^(?!stable/).*$``: rewritten to the
  negation of ``^stable/``, which means the same and runs in RE2.

Any other pattern RE2 refuses is an error in untrusted configuration; in
trusted configuration it is compiled with Python's ``re`` and a warning is
returned (the released behaviour, so existing deployments keep loading).
"""

from __future__ import annotations

import re

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False

# No character with a meaning in a pattern: it matches only itself.
_PLAIN = re.compile(r'[^.^$*+?{}\[\]\\|()]*')

# ^(?!X) followed by nothing, .* or .*$ -- "does not start with X".
_LOOKAHEAD = re.compile(r'^\^\(\?!(?P<inner>(?:[^()\\]|\\.)*)\)(?:\.\*)?\$?$')


class RegexError(ValueError):
    """A pattern that cannot be used; ``reason`` says why."""

    def __init__(self, pattern: str, reason: str):
        super().__init__(f'invalid regular expression "{pattern}": {reason}')
        self.pattern = pattern
        self.reason = reason


class Regex:
    """A compiled pattern, possibly negated. ``match``/``search``/
    ``fullmatch`` return True or False."""

    def __init__(self, pattern: str, compiled, negate: bool = False,
                 engine: str = 're2', literal: bool = False):
        self.pattern = pattern
        self._compiled = compiled
        self.negate = negate
        self.engine = engine
        # A pattern without a special character (``patchset-created``,
        # ``master``) matches as plain text: no call into the engine, for
        # what every event is matched against.
        self._literal = pattern if literal else None

    def match(self, text: str) -> bool:
        if self._literal is not None:
            return (text or '').startswith(self._literal) != self.negate
        return (self._compiled.match(text or '') is not None) != self.negate

    def search(self, text: str) -> bool:
        if self._literal is not None:
            return (self._literal in (text or '')) != self.negate
        return (self._compiled.search(text or '') is not None) != self.negate

    def fullmatch(self, text: str) -> bool:
        if self._literal is not None:
            return ((text or '') == self._literal) != self.negate
        return (self._compiled.fullmatch(text or '') is not None) != self.negate

    def __repr__(self) -> str:
        neg = 'not ' if self.negate else ''
        return f'<Regex {neg}{self.pattern!r} ({self.engine})>'


def compile_regex(spec, trusted: bool = False) -> tuple[Regex, str | None]:
    """Compile a pattern or ``{regex, negate}`` mapping. Returns (Regex,
    warning or None); raises RegexError."""
    if isinstance(spec, dict):
        pattern, negate = spec.get('regex'), bool(spec.get('negate', False))
    else:
        pattern, negate = spec, False
    if not isinstance(pattern, str):
        raise RegexError(str(pattern), 'a regular expression must be a string')
    try:
        return Regex(pattern, re2.compile(pattern, _OPTIONS), negate,
                     literal=_PLAIN.fullmatch(pattern) is not None), None
    except re2.error as e:
        reason = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
    m = _LOOKAHEAD.match(pattern)
    if m:
        inner = m.group('inner')
        inner = inner if inner.startswith('^') else '^' + inner
        try:
            return Regex(pattern, re2.compile(inner, _OPTIONS), not negate), None
        except re2.error:
            pass
    if not trusted:
        raise RegexError(pattern, f'{reason} (only RE2 syntax is accepted here)')
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise RegexError(pattern, str(e)) from None
    return Regex(pattern, compiled, negate, engine='python'), (
        f'the regular expression "{pattern}" uses syntax RE2 does not support ({reason}); '
        'it is evaluated with Python\'s re')
