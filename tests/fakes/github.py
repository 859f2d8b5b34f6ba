"""A fake GitHub that speaks GitHub's REST API over real HTTP, built from
GitHub's documented request and response formats, so the GitHub driver
runs unmodified against it (``api_url=http://127.0.0.1:<port>``).

State is plain dicts a test can arrange and inspect: ``repos[name]``
holds ``pulls`` (number -> PR object as the API returns it), ``reviews``,
``files``, ``statuses`` and ``check_runs`` (per sha), ``comments``,
``permissions`` (login -> read/write/admin), ``protected`` (branch ->
required status contexts) and ``merges`` (what was merged, how).

Authentication as GitHub does it: an App JWT (RS256, checked against the
app's public key) for installation lookups and token creation, then
``token <installation token>`` until it expires; personal tokens listed in
``personal_tokens``. ``rate_limit`` (requests left) makes it answer 403
with ``X-RateLimit-Remaining: 0`` and a reset time once used up. GETs
carry ETags and answer 304 to a matching If-None-Match.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

from zuul.lib import jwt


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


class FakeGithub:
    def __init__(self, app_id: int | None = None, app_public_key: str | None = None,
                 token_lifetime: float = 3600):
        self.app_id = app_id
        self.app_public_key = app_public_key
        self.token_lifetime = token_lifetime
        self.repos: dict[str, dict] = {}
        self.installations: dict[str, int] = {}          # repo -> installation id
        self.tokens: dict[str, tuple[int, float]] = {}   # token -> (installation, expiry)
        self.personal_tokens: set[str] = set()
        self.rate_limit: int | None = None
        self.rate_reset_after = 2.0
        self.requests: list[tuple[str, str, str]] = []  # (method, path, auth kind)
        self.lock = threading.Lock()
        self._server = None
        self._next_id = 1000
        self.git_root = tempfile.mkdtemp(prefix='fake-github-git-')

    # -- arranging ----------------------------------------------------------
    def repo(self, name: str) -> dict:
        return self.repos.setdefault(name, {
            'pulls': {}, 'reviews': {}, 'files': {}, 'statuses': {}, 'check_runs': {},
            'comments': {}, 'permissions': {}, 'protected': {}, 'merges': [],
            'labels': {}})

    def open_pull(self, repo: str, number: int, head_sha: str, branch: str = 'main',
                  title: str = 'A change', body: str = '', files=(), user: str = 'alice',
                  draft: bool = False) -> dict:
        r = self.repo(repo)
        pr = {'number': number, 'state': 'open', 'merged': False, 'draft': draft,
              'title': title, 'body': body, 'user': {'login': user},
              'head': {'sha': head_sha, 'ref': f'feature-{number}'},
              'base': {'ref': branch, 'repo': {'full_name': repo}},
              'labels': [], 'mergeable': True, 'updated_at': iso(time.time()),
              'html_url': f'https://github.com/{repo}/pull/{number}'}
        r['pulls'][number] = pr
        r['files'][number] = list(files)
        r['reviews'].setdefault(number, [])
        return pr

    def add_review(self, repo: str, number: int, login: str, state: str) -> None:
        self.repo(repo)['reviews'][number].append(
            {'id': self._new_id(), 'user': {'login': login}, 'state': state.upper(),
             'submitted_at': iso(time.time())})

    def _new_id(self) -> int:
        with self.lock:
            self._next_id += 1
            return self._next_id

    # -- serving ------------------------------------------------------------
    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _serve(self):
                fake._handle(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve  # noqa: N815

        self._server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f'http://127.0.0.1:{self._server.server_address[1]}'

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        shutil.rmtree(self.git_root, ignore_errors=True)

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        url = urlparse(h.path)
        length = int(h.headers.get('Content-Length') or 0)
        if re.match(r'^/[^/]+/[^/]+\.git/', url.path):
            return self._git(h, url, h.rfile.read(length) if length else b'')
        body = json.loads(h.rfile.read(length)) if length else None
        status, payload, headers = self._route(h.command, url.path, parse_qs(url.query),
                                               h.headers, body)
        raw = b'' if payload is None else json.dumps(payload).encode()
        if h.command == 'GET' and status == 200:
            etag = '"' + hashlib.sha1(raw).hexdigest() + '"'
            headers['ETag'] = etag
            if h.headers.get('If-None-Match') == etag:
                status, raw = 304, b''
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, str(v))
        h.send_header('Content-Type', 'application/json')
        h.send_header('Content-Length', str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    # -- git over HTTP (git http-backend, GitHub's URL layout) ---------------
    def bare_repo(self, name: str) -> str:
        """The bare repository behind ``https://github.com/<name>.git``
        (made on first use under ``git_root``)."""
        path = os.path.join(self.git_root, name + '.git')
        if not os.path.isdir(path):
            subprocess.run(['git', 'init', '-q', '--bare', '-b', 'main', path], check=True)
        return path

    def _git(self, h, url, data: bytes) -> None:
        name = url.path[1:].split('.git/', 1)[0]
        auth = h.headers.get('Authorization') or ''
        ok = name in self.repos and not self.repos[name].get('private')
        if auth.startswith('Basic '):
            user, _, token = base64.b64decode(auth[6:]).decode().partition(':')
            known = self.tokens.get(token)
            ok = token in self.personal_tokens or bool(known and known[1] > time.time())
        self.requests.append(('GIT', url.path, 'token' if auth else 'anonymous'))
        if not ok or name not in self.repos:
            h.send_response(401 if name in self.repos else 404)
            h.send_header('WWW-Authenticate', 'Basic realm="GitHub"')
            h.send_header('Content-Length', '0')
            h.end_headers()
            return
        self.bare_repo(name)
        env = dict(os.environ, GIT_PROJECT_ROOT=self.git_root, GIT_HTTP_EXPORT_ALL='1',
                   PATH_INFO=url.path, QUERY_STRING=url.query, REQUEST_METHOD=h.command,
                   CONTENT_TYPE=h.headers.get('Content-Type') or '',
                   CONTENT_LENGTH=str(len(data)), REMOTE_USER='zuul', REMOTE_ADDR='127.0.0.1')
        out = subprocess.run(['git', 'http-backend'], input=data, env=env,
                             capture_output=True).stdout
        head, _, payload = out.partition(b'\r\n\r\n')
        status = 200
        headers = []
        for line in head.decode().split('\r\n'):
            key, _, value = line.partition(':')
            if key.lower() == 'status':
                status = int(value.split()[0])
            elif key:
                headers.append((key, value.strip()))
        h.send_response(status)
        for key, value in headers:
            h.send_header(key, value)
        h.send_header('Content-Length', str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    # -- authentication -----------------------------------------------------
    def _auth(self, headers) -> tuple[str, object]:
        value = headers.get('Authorization') or ''
        if value.startswith('Bearer '):
            try:
                claims = jwt.decode(value[7:], self.app_public_key, leeway=60)
            except (jwt.TokenError, ValueError):
                return 'bad', None
            return ('app', None) if str(claims.get('iss')) == str(self.app_id) else ('bad', None)
        if value.startswith('token '):
            token = value[6:]
            if token in self.personal_tokens:
                return 'personal', None
            known = self.tokens.get(token)
            if known and known[1] > time.time():
                return 'installation', known[0]
            return 'bad', None
        return 'anonymous', None

    def _rate(self) -> tuple[int, dict] | None:
        with self.lock:
            if self.rate_limit is None:
                return None
            if self.rate_limit <= 0:
                reset = int(time.time() + self.rate_reset_after)
                return 403, {'X-RateLimit-Remaining': '0', 'X-RateLimit-Reset': str(reset)}
            self.rate_limit -= 1
            return None

    # -- routes -------------------------------------------------------------
    def _route(self, method, path, query, headers, body):
        kind, installation = self._auth(headers)
        self.requests.append((method, path, kind))
        if kind == 'bad':
            return 401, {'message': 'Bad credentials'}, {}
        limited = self._rate()
        if limited:
            return limited[0], {'message': 'API rate limit exceeded'}, limited[1]
        m = re.match(r'^/app/installations/(\d+)/access_tokens$', path)
        if m and method == 'POST':
            if kind != 'app':
                return 401, {'message': 'A JSON web token could not be decoded'}, {}
            token = 'ghs_' + secrets.token_hex(16)
            expires = time.time() + self.token_lifetime
            self.tokens[token] = (int(m.group(1)), expires)
            return 201, {'token': token, 'expires_at': iso(expires)}, {}
        m = re.match(r'^/repos/([^/]+/[^/]+)(/.*)?$', path)
        if not m or m.group(1) not in self.repos:
            return 404, {'message': 'Not Found'}, {}
        name, rest = m.group(1), m.group(2) or ''
        if rest == '/installation':
            if kind != 'app' or name not in self.installations:
                return 404, {'message': 'Not Found'}, {}
            return 200, {'id': self.installations[name]}, {}
        if kind == 'app':
            return 403, {'message': 'an app JWT cannot call this endpoint'}, {}
        if kind == 'installation' and self.installations.get(name) != installation:
            return 404, {'message': 'Not Found'}, {}
        if method != 'GET' and kind == 'anonymous':
            return 401, {'message': 'Requires authentication'}, {}
        return self._repo_route(method, self.repos[name], name, rest, query, body)

    def _repo_route(self, method, r, name, rest, query, body):
        for pattern, handler in self._ROUTES:
            m = re.match(pattern, rest)
            if m and handler.__name__.split('_')[0].upper() == method:
                return handler(self, r, name, body, query, *m.groups())
        return 404, {'message': 'Not Found'}, {}

    def get_pulls(self, r, name, body, query):
        state = (query.get('state') or ['open'])[0]
        base = (query.get('base') or [None])[0]
        out = [pr for pr in r['pulls'].values()
               if (state == 'all' or pr['state'] == state) and
               (base is None or pr['base']['ref'] == base)]
        return 200, _page(out, query), {}

    def get_pull(self, r, name, body, query, number):
        pr = r['pulls'].get(int(number))
        return (200, pr, {}) if pr else (404, {'message': 'Not Found'}, {})

    def get_files(self, r, name, body, query, number):
        return 200, _page([{'filename': f} for f in r['files'].get(int(number), [])],
                          query), {}

    def get_reviews(self, r, name, body, query, number):
        return 200, _page(r['reviews'].get(int(number), []), query), {}

    def post_reviews(self, r, name, body, query, number):
        state = {'APPROVE': 'APPROVED', 'REQUEST_CHANGES': 'CHANGES_REQUESTED'}.get(
            body.get('event'), 'COMMENTED')
        review = {'id': self._new_id(), 'user': {'login': 'zuul[bot]'}, 'state': state,
                  'body': body.get('body', ''), 'submitted_at': iso(time.time())}
        r['reviews'].setdefault(int(number), []).append(review)
        return 200, review, {}

    def get_permission(self, r, name, body, query, login):
        return 200, {'permission': r['permissions'].get(login, 'read')}, {}

    def get_status(self, r, name, body, query, sha):
        statuses = r['statuses'].get(sha, [])
        return 200, {'sha': sha, 'statuses': statuses, 'total_count': len(statuses)}, {}

    def post_status(self, r, name, body, query, sha):
        now = time.time()
        status = {'state': body['state'], 'context': body.get('context', 'default'),
                  'description': body.get('description'), 'target_url':
                  body.get('target_url'), 'creator': {'login': 'zuul[bot]'},
                  'created_at': iso(now), 'received': now}
        r.setdefault('status_log', []).append(dict(status, sha=sha))
        # GitHub keeps the latest status per context.
        kept = [s for s in r['statuses'].get(sha, []) if s['context'] != status['context']]
        r['statuses'][sha] = [status, *kept]
        return 201, status, {}

    def get_checkruns(self, r, name, body, query, sha):
        runs = r['check_runs'].get(sha, [])
        wanted = (query.get('check_name') or [None])[0]
        if wanted is not None:
            runs = [run for run in runs if run['name'] == wanted]
        return 200, {'total_count': len(runs), 'check_runs': runs}, {}

    def post_checkrun(self, r, name, body, query):
        run = dict(body, id=self._new_id(), app={'slug': 'zuul'})
        r['check_runs'].setdefault(body['head_sha'], []).append(run)
        return 201, run, {}

    def patch_checkrun(self, r, name, body, query, run_id):
        for runs in r['check_runs'].values():
            for run in runs:
                if run['id'] == int(run_id):
                    run.update(body)
                    return 200, run, {}
        return 404, {'message': 'Not Found'}, {}

    def get_commitpulls(self, r, name, body, query, sha):
        return 200, [pr for pr in r['pulls'].values() if pr['head']['sha'] == sha], {}

    def post_comment(self, r, name, body, query, number):
        comment = {'id': self._new_id(), 'body': body['body']}
        r['comments'].setdefault(int(number), []).append(comment)
        return 201, comment, {}

    def post_labels(self, r, name, body, query, number):
        pr = r['pulls'][int(number)]
        for label in body.get('labels', []):
            if label not in [x['name'] for x in pr['labels']]:
                pr['labels'].append({'name': label})
        return 200, pr['labels'], {}

    def delete_label(self, r, name, body, query, number, label):
        pr = r['pulls'][int(number)]
        label = unquote(label)
        if label not in [x['name'] for x in pr['labels']]:
            return 404, {'message': 'Label does not exist'}, {}
        pr['labels'] = [x for x in pr['labels'] if x['name'] != label]
        return 200, pr['labels'], {}

    def put_merge(self, r, name, body, query, number):
        pr = r['pulls'].get(int(number))
        if pr is None or pr['state'] != 'open':
            return 404, {'message': 'Not Found'}, {}
        if body.get('sha') and body['sha'] != pr['head']['sha']:
            return 409, {'message': 'Head branch was modified. Review and try the merge '
                                    'again.'}, {}
        required = r['protected'].get(pr['base']['ref']) or []
        passed = {s['context'] for s in r['statuses'].get(pr['head']['sha'], [])
                  if s['state'] == 'success'}
        missing = [c for c in required if c not in passed]
        if missing:
            return 405, {'message': f'Required status check "{missing[0]}" is expected.'}, {}
        method = body.get('merge_method', 'merge')
        sha = pr['head']['sha']
        if os.path.isdir(os.path.join(self.git_root, name + '.git')):
            sha = self._git_merge(name, pr['base']['ref'], pr['head']['sha'], method,
                                  body.get('commit_title') or pr['title'])
            if sha is None:
                return 405, {'message': 'Pull Request is not mergeable'}, {}
        pr.update(state='closed', merged=True, updated_at=iso(time.time()),
                  merge_commit_sha=sha)
        r['merges'].append({'number': int(number), 'method': method})
        return 200, {'merged': True, 'sha': sha, 'message': 'Pull Request successfully '
                                                          'merged'}, {}

    def _git_merge(self, name: str, branch: str, head: str, method: str,
                   title: str) -> str | None:
        """Merge ``head`` into ``branch`` of the bare repository as GitHub
        does: a merge commit (``merge``) or one new commit on the branch
        with the merged tree (``squash``; ``rebase`` is the same here)."""
        bare = os.path.join(self.git_root, name + '.git')

        def git(*args):
            return subprocess.run(['git', '-C', bare, *args], capture_output=True,
                                  text=True, env=dict(os.environ, GIT_AUTHOR_NAME='GitHub',
                                                      GIT_AUTHOR_EMAIL='noreply@github.com',
                                                      GIT_COMMITTER_NAME='GitHub',
                                                      GIT_COMMITTER_EMAIL='noreply@github.com'))
        base = git('rev-parse', f'refs/heads/{branch}').stdout.strip()
        tree = git('merge-tree', '--write-tree', base, head)
        if tree.returncode != 0:
            return None   # conflicts
        parents = ['-p', base] + (['-p', head] if method == 'merge' else [])
        sha = git('commit-tree', tree.stdout.split()[0], *parents, '-m', title).stdout.strip()
        git('update-ref', f'refs/heads/{branch}', sha, base)
        return sha

    def get_branches(self, r, name, body, query):
        bare = os.path.join(self.git_root, name + '.git')
        heads = r.get('branches') or subprocess.run(
            ['git', '-C', bare, 'for-each-ref', '--format=%(refname:short)', 'refs/heads/'],
            capture_output=True, text=True).stdout.split()
        wanted = (query.get('protected') or [None])[0]
        out = [{'name': b, 'protected': b in r['protected']} for b in heads]
        if wanted is not None:
            out = [b for b in out if b['protected'] == (wanted == 'true')]
        return 200, _page(out, query), {}

    _ROUTES = [
        (r'^/branches$', get_branches),
        (r'^/pulls$', get_pulls),
        (r'^/pulls/(\d+)$', get_pull),
        (r'^/pulls/(\d+)/files$', get_files),
        (r'^/pulls/(\d+)/reviews$', get_reviews),
        (r'^/pulls/(\d+)/reviews$', post_reviews),
        (r'^/pulls/(\d+)/merge$', put_merge),
        (r'^/collaborators/([^/]+)/permission$', get_permission),
        (r'^/commits/([0-9a-f]+)/status$', get_status),
        (r'^/commits/([0-9a-f]+)/check-runs$', get_checkruns),
        (r'^/commits/([0-9a-f]+)/pulls$', get_commitpulls),
        (r'^/statuses/([0-9a-f]+)$', post_status),
        (r'^/check-runs$', post_checkrun),
        (r'^/check-runs/(\d+)$', patch_checkrun),
        (r'^/issues/(\d+)/comments$', post_comment),
        (r'^/issues/(\d+)/labels$', post_labels),
        (r'^/issues/(\d+)/labels/([^/]+)$', delete_label),
    ]


def _page(items: list, query) -> list:
    per_page = int((query.get('per_page') or [30])[0])
    page = int((query.get('page') or [1])[0])
    return items[(page - 1) * per_page: page * per_page]
