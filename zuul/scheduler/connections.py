"""The live connections of a daemon, by name."""

from __future__ import annotations


class ConnectionRegistry:
    def __init__(self, connections=()):
        self._by_name = {}
        for c in connections:
            self.add(c)

    def add(self, connection) -> None:
        if connection.name in self._by_name:
            raise ValueError(f'connection {connection.name} defined twice')
        self._by_name[connection.name] = connection

    def get(self, name: str):
        return self._by_name.get(name)

    def all(self):
        return list(self._by_name.values())

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def start(self, on_event) -> None:
        for c in self._by_name.values():
            start = getattr(c, 'start', None)
            if start is not None:
                start(on_event)

    def stop(self) -> None:
        for c in self._by_name.values():
            stop = getattr(c, 'stop', None)
            if stop is not None:
                stop()
