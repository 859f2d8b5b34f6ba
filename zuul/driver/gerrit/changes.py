"""Gerrit query JSON -> Change, and the dependencies a change declares.

Dependencies come from two places, as in released Zuul: the git parent
(``dependsOn`` in the query output, same project and branch) and
``Depends-On:`` footers in the commit message, which name a change by URL
(on this or another connection) or, in older configurations, by Change-Id.
"""

from __future__ import annotations

import re
import urllib.parse

from zuul.model.change import Change

DEPENDS_ON_RE = re.compile(r'^Depends-On:\s*(\S+)\s*$', re.MULTILINE | re.IGNORECASE)
CHANGE_ID_RE = re.compile(r'^I[0-9a-f]{8,40}$')
# https://host/c/project/+/123, https://host/#/c/123/, https://host/123
_URL_NUMBER_RES = (
    re.compile(r'/c/.+/\+/(\d+)(?:/\d+)?/?$'),
    re.compile(r'/#/c/(\d+)(?:/\d+)?/?$'),
    re.compile(r'/c/(\d+)(?:/\d+)?/?$'),
    re.compile(r'^/(\d+)/?$'),
)


def depends_on_footers(message: str) -> list[str]:
    """The values of every ``Depends-On:`` footer, in order, de-duplicated."""
    seen = []
    for value in DEPENDS_ON_RE.findall(message or ''):
        if value not in seen:
            seen.append(value)
    return seen


def change_number_from_url(url: str, baseurl: str) -> int | None:
    """The change number a URL names if it points at this Gerrit."""
    parsed = urllib.parse.urlparse(url)
    base = urllib.parse.urlparse(baseurl)
    if parsed.hostname is None or base.hostname is None:
        return None
    if parsed.hostname.lower() != base.hostname.lower():
        return None
    path = parsed.path
    base_path = base.path.rstrip('/')
    if base_path and path.startswith(base_path):
        path = path[len(base_path):]
    target = path + (f'#{parsed.fragment}' if parsed.fragment else '')
    target = target.replace('#', '/#', 1) if '#' in target and '/#' not in target else target
    for regex in _URL_NUMBER_RES:
        m = regex.search(target)
        if m:
            return int(m.group(1))
    return None


def change_web_url(baseurl: str, project: str, number: int) -> str:
    """The web page of a change on the Gerrit at ``baseurl`` (the
    connection's ``baseurl``), in the form Gerrit 3.x links to."""
    return f'{baseurl.rstrip("/")}/c/{project}/+/{number}'


def _approvals(patchset: dict) -> list[dict]:
    out = []
    for a in patchset.get('approvals') or []:
        by = a.get('by') or {}
        out.append({'type': a.get('type'), 'description': a.get('description'),
                    'value': a.get('value'), 'grantedOn': a.get('grantedOn'),
                    'by': by, 'username': by.get('username'), 'email': by.get('email')})
    return out


def change_from_query(data: dict, connection: str, patchset: int | None = None,
                      baseurl: str | None = None) -> Change:
    """Build a Change from one ``gerrit query`` row. ``patchset`` selects
    an older patchset (then ``is_current_patchset`` is False). With
    ``baseurl`` the change's ``url`` is built from it rather than taken
    from the row (which carries the server's own idea of its web URL)."""
    project = data['project']
    if isinstance(project, dict):
        project = project['name']
    current = data.get('currentPatchSet') or {}
    patchsets = data.get('patchSets') or ([current] if current else [])
    chosen = current
    if patchset is not None:
        chosen = next((ps for ps in patchsets if int(ps['number']) == int(patchset)), None)
        if chosen is None:
            chosen = {'number': patchset, 'ref': '', 'revision': None}
    files = [f['file'] for f in chosen.get('files') or [] if f.get('file') != '/COMMIT_MSG'] \
        if chosen.get('files') is not None else None
    number = int(data['number'])
    url = change_web_url(baseurl, project, number) if baseurl else data.get('url', '')
    change = Change(
        connection=connection, project=project, ref=chosen.get('ref') or '',
        newrev=chosen.get('revision'), url=url, number=number,
        patchset=int(chosen.get('number') or 0), branch_name=data.get('branch', ''),
        change_id=data.get('id', ''), subject=data.get('subject', ''),
        message=data.get('commitMessage', ''), owner=data.get('owner') or {},
        status=data.get('status', 'NEW'),
        is_current_patchset=not current or chosen is current or
        str(chosen.get('number')) == str(current.get('number')),
        approvals=_approvals(current), files=files,
        topic=data.get('topic'), wip=bool(data.get('wip', False)),
        hashtags=list(data.get('hashtags') or []),
        last_updated=int(data.get('lastUpdated') or 0))
    # Dependencies are of the current patchset (the chosen one may be the
    # same patchset from the patchSets list: compare numbers).
    if current and str(chosen.get('number')) == str(current.get('number')):
        change.git_parent_changes = [
            f'{connection}/{int(d["number"])}' for d in data.get('dependsOn') or []]
        change.needed_by_changes = [
            f'{connection}/{int(d["number"])}' for d in data.get('neededBy') or []]
    return change


def topic_changes(connection, topic: str) -> list[Change]:
    """The open changes of ``topic`` on a Gerrit ``connection`` (``gerrit
    query status:open topic:<topic>``), for queue
    ``dependencies-by-topic``."""
    term = f'"{topic}"' if any(ch.isspace() for ch in topic) else topic
    return [change_from_query(row, connection.name, baseurl=connection.baseurl)
            for row in connection.ssh.query(f'status:open topic:{term}')]
