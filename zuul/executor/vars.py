"""The ``zuul`` variable, with the names released Zuul v3 documents.

Roles from zuul-jobs read e.g. ``zuul.project.src_dir``,
``zuul.executor.log_root``, ``zuul.projects[...]``, ``zuul.items``; the
names and shapes here are that contract.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import os
import re
import subprocess

from zuul.executor.jobdir import JobDir
from zuul.executor.protocol import ExecuteRequest, ItemSpec
from zuul.executor.workspace import src_dir


def project_vars(canonical_hostname: str, name: str, scheme: str = 'golang') -> dict:
    """``{name, short_name, canonical_hostname, canonical_name, src_dir}``;
    ``src_dir`` as the job's ``workspace-scheme`` lays the project out."""
    return {
        'name': name,
        'short_name': name.split('/')[-1],
        'canonical_hostname': canonical_hostname,
        'canonical_name': f'{canonical_hostname}/{name}',
        'src_dir': src_dir(scheme, canonical_hostname, name),
    }


def encode_message(message: str | None) -> str | None:
    """``zuul.message``: the commit message base64-encoded (as released
    Zuul gives it; playbooks use the ``b64decode`` filter)."""
    if message is None:
        return None
    return base64.b64encode(message.encode('utf8')).decode('ascii')


def _ref_vars(item: ItemSpec, scheme: str = 'golang') -> dict:
    """The fields an item and ``zuul`` share: project, branch, change,
    patchset, change_url, change_message, topic, tag, oldrev, newrev,
    commit_id -- each only for the kinds of ref released Zuul sets it."""
    data = {
        'project': project_vars(item.canonical_hostname, item.project, scheme),
        'change_url': item.change_url,
    }
    if item.branch:
        data['branch'] = item.branch
    if item.number is not None:
        data['change'] = str(item.number)
        data['patchset'] = str(item.patchset)
        data['change_message'] = item.message or ''
        data['topic'] = item.topic
    else:
        tag = _tag_of(item.ref)
        if tag is not None:
            data['tag'] = tag
        if item.oldrev:
            data['oldrev'] = item.oldrev
        if item.newrev:
            data['newrev'] = item.newrev
        commit = item.newrev if item.newrev and set(item.newrev) != {'0'} else item.oldrev
        if commit:
            data['commit_id'] = commit
    return data


def _tag_of(ref: str | None) -> str | None:
    if ref and ref.startswith('refs/tags/'):
        return ref[len('refs/tags/'):]
    return None


def _item_vars(item: ItemSpec, scheme: str = 'golang') -> dict:
    data = _ref_vars(item, scheme)
    if item.bundle_id:
        data['bundle_id'] = item.bundle_id
    return data


@functools.lru_cache(maxsize=8)
def installed_ansible_version(ansible_playbook: str = 'ansible-playbook') -> str:
    """``major.minor`` of the ansible-core that ``ansible_playbook`` runs
    (e.g. ``2.16``); that of the importable ansible-core if it cannot run."""
    text = ''
    try:
        text = subprocess.run([ansible_playbook, '--version'], capture_output=True,
                              text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        pass
    match = re.search(r'core (\d+)\.(\d+)', text)
    if match:
        return f'{match.group(1)}.{match.group(2)}'
    try:
        from importlib.metadata import version
        return '.'.join(version('ansible-core').split('.')[:2])
    except Exception:
        return ''


def git_head(path: str) -> str | None:
    try:
        out = subprocess.run(['git', '-C', path, 'rev-parse', 'HEAD'], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def projects_vars(request: ExecuteRequest, checkouts: dict, work_root: str | None = None
                  ) -> dict:
    """``zuul.projects`` keyed by canonical name.

    ``checkouts`` maps (connection, project) -> the branch or ref checked out;
    with ``work_root`` each entry also gets the ``commit`` checked out.
    """
    job = request.job
    item = request.items[-1] if request.items else None
    overrides = {(rp.connection, rp.project): rp.override_checkout
                 for rp in job.required_projects if rp.override_checkout}
    hostnames = request.zuul.canonical_hostnames
    required = {(rp.connection, rp.project) for rp in request.job.required_projects}
    projects = {}
    for (connection, name), checkout in checkouts.items():
        data = project_vars(hostnames.get(connection, connection), name,
                            job.workspace_scheme or 'golang')
        data['required'] = (connection, name) in required
        data['checkout'] = checkout
        data['checkout_description'] = _checkout_description(
            (connection, name), checkout, overrides, job.override_checkout, item)
        if work_root is not None:
            data['commit'] = git_head(os.path.join(work_root, data['src_dir']))
        projects[data['canonical_name']] = data
    return projects


def _checkout_description(key, checkout, overrides, job_override, item) -> str:
    if key in overrides and overrides[key] == checkout:
        return 'project override ref'
    if job_override and job_override == checkout:
        return 'job override ref'
    if item is not None and item.branch == checkout:
        return 'zuul branch' if (item.connection, item.project) != key \
            else 'item branch'
    return 'project default branch'


def zuul_vars(request: ExecuteRequest, jobdir: JobDir, hostname: str,
              checkouts: dict, playbook_context: dict | None = None,
              ansible_playbook: str = 'ansible-playbook') -> dict:
    """The whole ``zuul`` dictionary for one build."""
    job = request.job
    ctx = request.zuul
    scheme = job.workspace_scheme or 'golang'
    item = request.items[-1] if request.items else None
    if item is not None and item.message is None and ctx.message is not None:
        item = dataclasses.replace(item, message=ctx.message)
    data = {
        'build': request.uuid,
        'buildset': ctx.buildset,
        'ref': ctx.ref or (item.ref if item else None),
        'pipeline': ctx.pipeline,
        'tenant': ctx.tenant,
        'job': job.name,
        'voting': job.voting,
        'attempts': request.attempt,
        'max_attempts': job.attempts,
        'pre_timeout': job.pre_timeout,
        'timeout': job.timeout,
        'post_timeout': job.post_timeout,
        'post_review': bool(ctx.post_review),
        'event_id': ctx.event_id,
        'jobtags': sorted(job.tags or ()),
        'child_jobs': list(ctx.child_jobs or ()),
        'artifacts': [dict(a) for a in ctx.artifacts or ()],
        'ansible_version': installed_ansible_version(ansible_playbook),
        'items': [_item_vars(i, scheme) for i in request.items[:-1]] + (
            [_item_vars(item, scheme)] if item is not None else []),
        'build_refs': [_ref_vars(item, scheme)] if item is not None else [],
        'buildset_refs': [_ref_vars(item, scheme)] if item is not None else [],
        'projects': projects_vars(request, checkouts, jobdir.work_root),
        'playbook_context': playbook_context or {
            'playbook_projects': {}, 'pre_playbooks': [], 'playbooks': [],
            'post_playbooks': []},
        'resources': {},
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
    if job.override_checkout:
        data['override_checkout'] = job.override_checkout
    if getattr(ctx, 'image_build_name', None):
        data['image_build_name'] = ctx.image_build_name
        data['image_formats'] = list(ctx.image_formats or ())
    message = ctx.message if ctx.message is not None else (item.message if item else None)
    if message is not None or (item is not None and item.number is not None):
        data['message'] = encode_message(message or '')
    if item is not None:
        # No zuul.newrev/oldrev for a change, as released Zuul: zuul-jobs'
        # set-zuul-log-path-fact tells a ref update by ``zuul.newrev is
        # defined``.
        data.update(_ref_vars(item, scheme))
    return data
