"""Nodesets: the named nodes (and groups of them) a job runs on."""

from __future__ import annotations

from dataclasses import dataclass, field

from zuul.model.base import ConfigObject


@dataclass(frozen=True)
class Node:
    """One node of a nodeset. ``names`` holds every name the node is known
    by (a node may have several); ``label`` is the Nodepool label."""

    names: tuple
    label: str

    @property
    def name(self) -> str:
        return self.names[0]


@dataclass(frozen=True)
class Group:
    """An Ansible inventory group over some of a nodeset's nodes."""

    name: str
    nodes: tuple


@dataclass(eq=False)
class Nodeset(ConfigObject):
    nodes: list[Node] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    alternatives: list = field(default_factory=list)

    def content(self):
        return (tuple(self.nodes), tuple(self.groups), tuple(self.alternatives))

    @property
    def labels(self) -> list[str]:
        return [n.label for n in self.nodes]

    def to_dict(self) -> dict:
        return {
            'name': self.name,
            'nodes': [{'name': list(n.names) if len(n.names) > 1 else n.name,
                       'label': n.label} for n in self.nodes],
            'groups': [{'name': g.name, 'nodes': list(g.nodes)} for g in self.groups],
        }
