"""The ``zuul`` variable, with the names released Zuul v3 documents.

Roles from zuul-jobs read e.g. ``zuul.project.src_dir``,
``zuul.executor.log_root``, ``zuul.projects[...]``, ``zuul.items``; the
names and shapes here are that contract.
"""

from __future__ import annotations

import os

from zuul.executor.jobdir import JobDir
from zuul.executor.protocol import ExecuteRequest, ItemSpec


def project_vars(canonical_hostname: str, name: str) -> dict:
    """``{name, short_name, canonical_hostname, canonical_name, src_dir}``."""
    return {
        'name': name,
        'short_name': name.split('/')[-1],
        'canonical_hostname': canonical_hostname,
        'canonical_name': f'{canonical_hostname}/{name}',
        'src_dir': os.path.join('src', canonical_hostname, name),
    }


def _item_vars(item: ItemSpec) -> dict:
    data = {
        'project': project_vars(item.canonical_hostname, item.project),
        'branch': item.branch,
        'change_url': item.change_url,
    }
    if item.number is not None:
        data['change'] = str(item.number)
        data['patchset'] = str(item.patchset)
    return data


def projects_vars(request: ExecuteRequest, checkouts: dict) -> dict:
    """``zuul.projects`` keyed by canonical name.

    ``checkouts`` maps (connection, project) -> the branch or ref checked out.
    """
    hostnames = request.zuul.canonical_hostnames
    required = {(rp.connection, rp.project) for rp in request.job.required_projects}
    projects = {}
    for (connection, name), checkout in checkouts.items():
        data = project_vars(hostnames.get(connection, connection), name)
        data['required'] = (connection, name) in required
        data['checkout'] = checkout
        projects[data['canonical_name']] = data
    return projects


def zuul_vars(request: ExecuteRequest, jobdir: JobDir, hostname: str,
              checkouts: dict) -> dict:
    """The whole ``zuul`` dictionary for one build."""
    job = request.job
    ctx = request.zuul
    item = request.items[-1] if request.items else None
    data = {
        'build': request.uuid,
        'buildset': ctx.buildset,
        'ref': ctx.ref or (item.ref if item else None),
        'pipeline': ctx.pipeline,
        'tenant': ctx.tenant,
        'job': job.name,
        'voting': job.voting,
        'attempts': request.attempt,
        'timeout': job.timeout,
        'post_timeout': job.post_timeout,
        'message': ctx.message,
        'items': [_item_vars(i) for i in request.items],
        'projects': projects_vars(request, checkouts),
        'executor': {
            'hostname': hostname,
            'src_root': jobdir.src_root,
            'log_root': jobdir.log_root,
            'work_root': jobdir.work_root,
            'inventory_file': jobdir.inventory_file,
            'result_data_file': jobdir.result_data_file,
        },
        '_inheritance_path': list(job.inheritance_path),
    }
    if item is not None:
        data['project'] = project_vars(item.canonical_hostname, item.project)
        data['branch'] = item.branch
        data['change_url'] = item.change_url
        if item.number is not None:
            data['change'] = str(item.number)
            data['patchset'] = str(item.patchset)
        if item.newrev:
            data['oldrev'] = item.oldrev
            data['newrev'] = item.newrev
    return data
