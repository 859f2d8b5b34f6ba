"""A project's ``merge-mode`` checked against its code-review system.

A connection that merges through its server's API (GitHub) says which
merge-modes it can perform and which the repository allows
(``allowed_merge_modes(project)``); a project whose mode is not among
them gets a configuration error on its project stanza when the layout
loads, instead of a refused merge after every gate run (released Zuul
refuses ``cherry-pick`` on GitHub the same way).
"""

from __future__ import annotations

import logging

from zuul.model.errors import ConfigError

log = logging.getLogger('zuul.scheduler.merge_modes')


def merge_mode_errors(layout, tenant, connections) -> list[ConfigError]:
    errors = []
    for tp in getattr(tenant, 'projects', ()) or ():
        connection = connections.get(tp.connection) if connections else None
        allowed_of = getattr(connection, 'allowed_merge_modes', None)
        if allowed_of is None:
            continue
        configs = layout.get_project_configs(tp.name)
        mode = layout.get_project_metadata(tp.name)['merge_mode']
        try:
            allowed = allowed_of(tp.name)
        except Exception as exc:
            log.warning('Unable to read the merge methods %s allows: %s', tp.name, exc)
            continue
        if mode in allowed:
            continue
        where = next((c for c in reversed(configs) if c.merge_mode), None)
        errors.append(ConfigError(
            reason=f'merge-mode {mode} is not supported by project {tp.name} on '
                   f'{tp.connection} (supported: {", ".join(sorted(allowed)) or "none"})',
            path=where.source_context.path if where else '',
            line=where.start_line if where else None, object_type='project',
            object_name=tp.name, project=tp.name,
            branch=where.source_context.branch if where else ''))
    return errors
