"""Where mergers and executors clone a GitLab project from, as released
Zuul documents ``cloneurl``: ``baseurl`` unless set; an ``ssh://`` (or
``git@host:``) cloneurl clones over SSH with ``sshkey``; over HTTP(S),
``api_token_name`` and ``api_token`` authenticate (HTTP basic), and
credentials written into cloneurl are used as given. Credentials never
become part of the URL a repository records (RepoRemote's contract):
they travel as an HTTP header through git's environment."""

from __future__ import annotations

import base64
import re
import urllib.parse

from zuul.merger.repos import RepoRemote, _bool_option, _config_env, _ssh_command


def gitlab_remote(options: dict, project: str) -> RepoRemote:
    server = options.get('server') or 'gitlab.com'
    baseurl = (options.get('baseurl') or f'https://{server}').rstrip('/')
    cloneurl = (options.get('cloneurl') or baseurl).rstrip('/')
    if cloneurl.startswith('ssh://') or re.match(r'^[^/:@]+@[^/:]+:', cloneurl):
        sep = ':' if not cloneurl.startswith('ssh://') and cloneurl.endswith(':') else '/'
        return RepoRemote(f'{cloneurl.rstrip(":")}{sep}{project}.git',
                          {'GIT_SSH_COMMAND': _ssh_command(options)})
    parts = urllib.parse.urlsplit(cloneurl)
    pairs = []
    user, password = parts.username, parts.password
    if parts.username is None and options.get('api_token_name') and options.get('api_token'):
        user, password = options['api_token_name'], options['api_token']
    if user is not None:
        netloc = parts.hostname + (f':{parts.port}' if parts.port else '')
        cloneurl = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, '', ''))
        basic = base64.b64encode(f'{urllib.parse.unquote(user)}:'
                                 f'{urllib.parse.unquote(password or "")}'.encode()).decode()
        pairs.append(('http.extraHeader', f'Authorization: Basic {basic}'))
    if _bool_option(options.get('verify_ssl')) is False:
        pairs.append(('http.sslVerify', 'false'))
    return RepoRemote(f'{cloneurl}/{project}.git', _config_env(pairs) if pairs else {})
