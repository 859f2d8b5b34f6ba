"""The explicit registry of connection drivers."""

from __future__ import annotations

from zuul.driver.base import Driver


class UnknownDriverError(KeyError):
    def __init__(self, name):
        super().__init__(name)
        self.name = name

    def __str__(self):
        return f'unknown driver "{self.name}"'


class DriverRegistry:
    """Maps driver names to driver instances. Tests build their own."""

    def __init__(self, drivers=()):
        self._drivers: dict[str, Driver] = {}
        for d in drivers:
            self.register(d)

    def register(self, driver: Driver) -> None:
        if driver.name in self._drivers:
            raise ValueError(f'driver {driver.name} registered twice')
        self._drivers[driver.name] = driver

    def get(self, name: str) -> Driver:
        try:
            return self._drivers[name]
        except KeyError:
            raise UnknownDriverError(name) from None

    def __contains__(self, name: str) -> bool:
        return name in self._drivers

    def names(self) -> list[str]:
        return sorted(self._drivers)

    def __iter__(self):
        return iter(self._drivers.values())


def default_registry() -> DriverRegistry:
    """Every driver this system ships, registered explicitly."""
    from zuul.driver import builtin
    return DriverRegistry(builtin.all_drivers())
