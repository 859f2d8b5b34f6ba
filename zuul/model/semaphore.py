"""Semaphores: limit how many jobs using one run at the same time."""

from __future__ import annotations

from dataclasses import dataclass

from zuul.model.base import ConfigObject


@dataclass(eq=False)
class Semaphore(ConfigObject):
    max: int = 1

    def content(self):
        return self.max
