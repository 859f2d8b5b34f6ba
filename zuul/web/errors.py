"""The error a zuul-web handler raises to answer with an HTTP status, the
query-parameter checks that raise it, and the marker of a text answer."""

from __future__ import annotations


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class TextResult(str):
    """A handler result served as text/plain instead of JSON."""


def int_param(kw, name, default, low=0, high=1000):
    """Query parameter ``name`` as an int in [low, high]; ``default`` when
    absent or empty; 400 otherwise."""
    value = kw.get(name)
    if value is None or value == '':
        return default
    try:
        number = int(value)
    except ValueError:
        raise HTTPError(400, f'{name} must be an integer, not "{value}"') from None
    if not low <= number <= high:
        raise HTTPError(400, f'{name} must be between {low} and {high}')
    return number
