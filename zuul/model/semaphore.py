"""Semaphores: limit how many jobs using one run at the same time."""

from __future__ import annotations

from dataclasses import dataclass

from zuul.model.base import ConfigObject


@dataclass(eq=False)
class Semaphore(ConfigObject):
    max: int = 1
    # A ``global-semaphore`` of the tenant file: its holders are counted
    # across every tenant that lists it in ``semaphores``.
    is_global: bool = False

    def content(self):
        return self.max
