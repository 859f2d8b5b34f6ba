"""``- nodeset:`` stanzas (and inline nodesets of jobs)."""

from __future__ import annotations

import voluptuous as vs

from zuul.configloader.schema import as_list, line_of, scalar_or_list, validate
from zuul.model.errors import ConfigurationError, SourceContext
from zuul.model.nodeset import Group, Node, Nodeset

# ``label`` is the released spelling; ``image`` is seed 000's.


def _has_label(node):
    if not node.get('label') and not node.get('image'):
        raise vs.Invalid('a node needs a "label"', path=['label'])
    return node


NODE = vs.All({vs.Required('name'): scalar_or_list(str), 'label': str, 'image': str},
              _has_label)
GROUP = {vs.Required('name'): str, vs.Required('nodes'): scalar_or_list(str)}

NODESET_ATTRIBUTES = {
    'nodes': scalar_or_list(NODE),
    'groups': [GROUP],
    'alternatives': [vs.Any(str, dict)],
    'description': str,
}
NODESET_SCHEMA = vs.Schema({vs.Required('name'): str, **NODESET_ATTRIBUTES})
ANONYMOUS_NODESET_SCHEMA = vs.Schema(NODESET_ATTRIBUTES)


class NodesetParser:
    """Builds Nodeset objects; checks that node names are unique and that
    groups only name nodes of the nodeset."""

    def __init__(self, context=None):
        self.context = context

    def parse(self, conf, source_context: SourceContext, anonymous: bool = False,
              _depth: int = 0) -> Nodeset:
        if _depth > 10:
            raise ConfigurationError('nodeset alternatives nest deeper than 10 levels')
        validate(ANONYMOUS_NODESET_SCHEMA if anonymous else NODESET_SCHEMA, dict(conf))
        if 'alternatives' in conf and ('nodes' in conf or 'groups' in conf):
            raise ConfigurationError('a nodeset with "alternatives" may not also have '
                                     '"nodes" or "groups"')
        for alternative in conf.get('alternatives') or ():
            if isinstance(alternative, dict):
                # An inline alternative is an anonymous nodeset of its own.
                self.parse(alternative, source_context, anonymous=True, _depth=_depth + 1)
        nodes = [self._node(n) for n in as_list(conf.get('nodes'))]
        self._check_unique(nodes)
        node_names = {name for n in nodes for name in n.names}
        groups = []
        for g in conf.get('groups') or ():
            members = tuple(as_list(g['nodes']))
            for member in members:
                if member not in node_names:
                    raise ConfigurationError(f'group "{g["name"]}" names the node '
                                             f'"{member}", which is not in the nodeset')
            groups.append(Group(g['name'], members))
        group_names = [g.name for g in groups]
        if len(group_names) != len(set(group_names)):
            raise ConfigurationError('group names in a nodeset must be unique')
        limit = getattr(self.context, 'max_nodes_per_job', None)
        if limit and len(nodes) > limit:
            raise ConfigurationError(f'the nodeset has {len(nodes)} nodes; the tenant '
                                     f'allows {limit} per job')
        return Nodeset(name=conf.get('name', ''), source_context=source_context,
                       start_line=line_of(conf), nodes=nodes, groups=groups,
                       alternatives=list(conf.get('alternatives') or ()))

    @staticmethod
    def _node(conf) -> Node:
        names = tuple(as_list(conf['name']))
        if 'localhost' in names:
            raise ConfigurationError('a node may not be named "localhost" (it is the '
                                     'executor)')
        return Node(names=names, label=conf.get('label') or conf.get('image'))

    @staticmethod
    def _check_unique(nodes) -> None:
        seen = set()
        for node in nodes:
            for name in node.names:
                if name in seen:
                    raise ConfigurationError(f'the node name "{name}" is used twice in '
                                             'the nodeset')
                seen.add(name)
