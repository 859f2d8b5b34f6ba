"""Shared change queues (``- queue:``) for dependent pipelines."""

from __future__ import annotations

from dataclasses import dataclass

from zuul.model.base import ConfigObject


@dataclass(eq=False)
class QueueConfig(ConfigObject):
    per_branch: bool = False
    allow_circular_dependencies: bool = False
    dependencies_by_topic: bool = False

    def content(self):
        return (self.per_branch, self.allow_circular_dependencies,
                self.dependencies_by_topic)
