"""What a build ran with, without its secrets (issue 32, ``zuul reproduce``).

The scheduler keeps, for every build it launches, its ExecuteRequest
with every confidential part taken out (:func:`public_request`) in the
build database; zuul-web serves it at
``/api/tenant/<tenant>/build/<uuid>/reproduction`` and ``zuul reproduce``
turns it back into an ExecuteRequest (:func:`request_from_public`) whose
secrets are those the user supplies.

Left out, never handed out:

* each playbook's decrypted secrets: only their names remain
  (``secret_names``);
* the post-review project key (``ssh_keys``);
* node credentials (a Kubernetes node's ``secret``) and resources.

The variables keep their ``__ansible_unsafe`` markings: untrusted text
stays text in the reproduction as on the executor.
"""

from __future__ import annotations

import copy
import re

from zuul.executor.protocol import PHASE_FIELDS, ExecuteRequest

FORMAT_VERSION = 1

# A build uuid as the scheduler makes them (uuid4 hex, or with dashes).
_UUID = re.compile(r'[0-9a-fA-F][0-9a-fA-F-]{7,63}')


def valid_build_uuid(uuid) -> bool:
    return isinstance(uuid, str) and _UUID.fullmatch(uuid) is not None


def project_keys(request: ExecuteRequest) -> list[tuple[str, str]]:
    """(connection, project) of every project the build may check out:
    items, required projects, playbook and role projects."""
    keys: list = []

    def add(connection, project):
        if (connection, project) not in keys:
            keys.append((connection, project))
    for item in request.items:
        add(item.connection, item.project)
    for rp in request.job.required_projects:
        add(rp.connection, rp.project)
    for phase in PHASE_FIELDS:
        for playbook in getattr(request.job, phase):
            add(playbook.connection, playbook.project)
            for role in playbook.roles:
                add(role.connection, role.project)
    for connection, projects in (request.repo_state or {}).items():
        for project in projects:
            add(connection, project)
    return keys


def git_urls(request: ExecuteRequest, resolver) -> dict:
    """{connection: {project: URL}} where each project is fetched from
    (``resolver``: zuul.merger.repos.RepoUrlResolver; URLs never carry
    credentials); a project whose URL is not known is left out."""
    urls: dict = {}
    for connection, project in project_keys(request):
        try:
            url = resolver.url(connection, project)
        except Exception:  # no git source known for it: the user names one
            continue
        urls.setdefault(connection, {})[project] = url
    return urls


def anonymous_sources(sources: dict) -> dict:
    """RepoUrlResolver connection sources without what would make it ask
    a code host for a token (only the URL is wanted here)."""
    out = {}
    for name, spec in sources.items():
        options = {k: v for k, v in (spec.get('options') or {}).items()
                   if k not in ('api_token', 'app_id', 'app_key', 'password')}
        out[name] = {'driver': spec.get('driver'), 'options': options}
    return out


def public_request(request: ExecuteRequest, resolver=None) -> dict:
    """``request`` as a dict holding no secret byte, with the git URLs
    of its projects when ``resolver`` is given."""
    data = copy.deepcopy(request.to_dict())
    data.pop('ssh_keys', None)
    for phase in PHASE_FIELDS:
        for playbook in data['job'].get(phase) or ():
            playbook['secret_names'] = sorted(playbook.pop('secrets', None) or {})
    for node in data.get('nodes') or ():
        node.pop('secret', None)
        node.pop('resource', None)
    urls = git_urls(request, resolver) if resolver is not None else {}
    return {'format': FORMAT_VERSION, 'request': data, 'git_urls': urls}


def request_from_public(data: dict, secrets: dict | None = None) -> ExecuteRequest:
    """The ExecuteRequest of a :func:`public_request` answer, each
    playbook given those of ``secrets`` (name -> value) it names."""
    if not isinstance(data, dict) or data.get('format') != FORMAT_VERSION:
        raise ValueError(f'reproduction data of format {data.get("format")!r}, '
                         f'expected {FORMAT_VERSION}' if isinstance(data, dict)
                         else 'reproduction data is not an object')
    raw = copy.deepcopy(data['request'])
    for phase in PHASE_FIELDS:
        for playbook in raw['job'].get(phase) or ():
            names = playbook.pop('secret_names', None) or []
            playbook['secrets'] = {n: secrets[n] for n in names if n in (secrets or {})}
    return ExecuteRequest.from_dict(raw)


def secret_uses(data: dict) -> list[tuple[str, int, dict]]:
    """(phase, index, playbook) of every playbook naming secrets."""
    out = []
    for phase in PHASE_FIELDS:
        for index, playbook in enumerate(data['request']['job'].get(phase) or ()):
            if playbook.get('secret_names'):
                out.append((phase, index, playbook))
    return out
