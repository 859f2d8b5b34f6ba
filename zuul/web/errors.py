"""The error a zuul-web handler raises to answer with an HTTP status."""

from __future__ import annotations


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
