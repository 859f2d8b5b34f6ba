"""A fake GitHub that speaks GitHub's REST API and git over real HTTP,
built from GitHub's documented request and response formats, so the
GitHub driver runs unmodified against it (``api_url=http://127.0.0.1:<port>``).

State is plain dicts a test can arrange and inspect: ``repos[name]``
holds ``pulls`` (number -> PR object as the API returns it, built from a
real payload: tests/fakes/github_payloads.py), ``reviews``, ``files``,
``statuses`` and ``check_runs`` (per sha), ``comments``, ``permissions``
(login -> read/write/admin), ``protected`` (branch -> a rule: required
status ``contexts``, approving ``reviews``, ``lock``; a bare list is the
contexts), ``settings`` (``allow_merge_commit``/``allow_squash_merge``/
``allow_rebase_merge``) and ``merges`` (what was merged, how).

It refuses what GitHub refuses (tests/fakes/github_merge.py): drafts,
conflicts, unmet protection rules and disallowed merge methods, with
GitHub's status codes and messages. Merges apply the commit title and
message sent, per method, and GitHub's webhooks follow (``hooks``:
``pull_request`` closed, ``push``), signed as GitHub signs them.

Authentication as GitHub does it: an App JWT (RS256, checked against the
app's public key) for installation lookups and token creation, then
``token <installation token>`` until it expires; personal tokens listed in
``personal_tokens``. Rate limits: every answer carries GitHub's
``X-RateLimit-*`` headers; ``rate_limit`` (requests left, or
``rate_limits[installation]``) answers 403 "API rate limit exceeded" with
``X-RateLimit-Remaining: 0`` once used up; ``secondary_concurrency`` (most
requests at once) answers GitHub's secondary-limit 403 with
``Retry-After``. GETs carry ETags and answer 304 to a matching
If-None-Match. ``mergeable`` is null on the first read after the head
or base moves, as GitHub computes it in the background.
"""


from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import queue
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

from tests.fakes import github_merge as merging
from tests.fakes import github_payloads as payloads
from tests.fakes.git_http import send_cgi_output
from tests.fakes.github_payloads import iso
from zuul.lib import jwt

RATE_DOCS = 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api'
SECONDARY_MESSAGE = ('You have exceeded a secondary rate limit. Please wait a few minutes '
                     'before you try again.')


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
        self.rate_limits: dict[int, int] = {}            # installation -> requests left
        self.rate_reset_after = 2.0
        self.secondary_concurrency: int | None = None
        self.secondary_retry_after = 1
        self.lazy_mergeable = True
        self.requests: list[tuple[str, str, str]] = []  # (method, path, auth kind)
        self.hooks: list[tuple[str, str]] = []           # (payload url, secret)
        self.deliveries: list[dict] = []                 # what was sent, answers
        self.lock = threading.Lock()
        self._active = 0
        self._server = None
        self._next_id = 1000
        self._outbox: queue.Queue = queue.Queue()
        self._sender = None
        self.git_root = tempfile.mkdtemp(prefix='fake-github-git-')

    # -- arranging ----------------------------------------------------------
    def repo(self, name: str) -> dict:
        with self.lock:
            if name not in self.repos:
                self.repos[name] = {
                    'pulls': {}, 'reviews': {}, 'files': {}, 'statuses': {},
                    'check_runs': {}, 'comments': {}, 'permissions': {}, 'protected': {},
                    'merges': [], 'labels': {}, 'fail_merges': [],
                    'settings': {'allow_merge_commit': True, 'allow_squash_merge': True,
                                 'allow_rebase_merge': True}}
            return self.repos[name]

    def repository(self, name: str) -> dict:
        r = self.repo(name)
        return payloads.repository(name, bool(r.get('private')), r['settings'])

    def open_pull(self, repo: str, number: int, head_sha: str, branch: str = 'main',
                  title: str = 'A change', body: str | None = '', files=(),
                  user: str = 'alice', draft: bool = False) -> dict:
        r = self.repo(repo)
        pr = payloads.pull_request(self.repository(repo), number, head_sha, branch, title,
                                   body, user, draft)
        if not self.lazy_mergeable:
            pr['mergeable'] = True
        r['pulls'][number] = pr
        r['files'][number] = list(files)
        r['reviews'].setdefault(number, [])
        return pr

    def add_review(self, repo: str, number: int, login: str, state: str) -> dict:
        pr = self.repo(repo)['pulls'][number]
        review = payloads.review(login, state, pr['head']['sha'], self._new_id())
        self.repo(repo)['reviews'][number].append(review)
        return review

    def dismiss_review(self, repo: str, number: int, review: dict) -> dict:
        review['state'] = 'DISMISSED'
        return review

    def touch(self, repo: str, number: int, **changes) -> dict:
        """Change a pull request as GitHub would (title, body, head sha,
        state, draft...): ``updated_at`` moves, mergeable is computed
        again."""
        pr = self.repo(repo)['pulls'][number]
        if 'head_sha' in changes:
            pr['head']['sha'] = changes.pop('head_sha')
            pr['mergeable'] = None
        pr.update(changes, updated_at=iso(time.time() + 1))
        return pr

    def _new_id(self) -> int:
        with self.lock:
            self._next_id += 1
            return self._next_id

    # -- webhooks GitHub sends ------------------------------------------------
    def send(self, kind: str, payload: dict) -> None:
        """Deliver ``payload`` as ``X-GitHub-Event: kind`` to every hook,
        in order, from a background sender as GitHub does."""
        if not self.hooks:
            return
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_loop, daemon=True,
                                            name='fake-github-hooks')
            self._sender.start()
        self._outbox.put((kind, payload))

    def wait_sent(self, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while self._outbox.unfinished_tasks and time.time() < deadline:
            time.sleep(0.01)

    def _send_loop(self) -> None:
        while True:
            kind, payload = self._outbox.get()
            try:
                for url, secret in list(self.hooks):
                    status = post_delivery(url, secret, kind, payload)
                    self.deliveries.append({'kind': kind, 'action': payload.get('action'),
                                            'status': status})
            finally:
                self._outbox.task_done()

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
        with self.lock:
            self._active += 1
        try:
            status, payload, headers = self._route(h.command, url.path,
                                                   parse_qs(url.query), h.headers, body)
        finally:
            with self.lock:
                self._active -= 1
        raw = b'' if payload is None else json.dumps(payload).encode()
        if h.command == 'GET' and status == 200:
            etag = '"' + hashlib.sha1(raw).hexdigest() + '"'
            headers['ETag'] = etag
            if h.headers.get('If-None-Match') == etag:
                status, raw = 304, b''
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, str(v))
        h.send_header('Content-Type', 'application/json; charset=utf-8')
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
        send_cgi_output(h, out)

    # -- authentication and rate limits ------------------------------------
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

    def _rate(self, kind: str, installation) -> tuple[int, dict, dict]:
        """(status or 0, headers, body) for GitHub's primary and
        secondary rate limits."""
        with self.lock:
            reset = int(time.time() + self.rate_reset_after)
            if self.secondary_concurrency is not None and \
                    self._active > self.secondary_concurrency:
                retry = {} if self.secondary_retry_after is None else \
                    {'Retry-After': str(self.secondary_retry_after)}
                return 403, retry, {
                    'message': SECONDARY_MESSAGE,
                    'documentation_url': RATE_DOCS + '#about-secondary-rate-limits'}
            left = self.rate_limits.get(installation, self.rate_limit) \
                if kind == 'installation' else self.rate_limit
            headers = {'X-RateLimit-Limit': '5000', 'X-RateLimit-Reset': str(reset),
                       'X-RateLimit-Resource': 'core'}
            if left is None:
                headers.update({'X-RateLimit-Remaining': '4999', 'X-RateLimit-Used': '1'})
                return 0, headers, {}
            if left <= 0:
                headers.update({'X-RateLimit-Remaining': '0', 'X-RateLimit-Used': '5000'})
                who = f'installation ID {installation}' if installation else '127.0.0.1'
                return 403, headers, {'message': f'API rate limit exceeded for {who}.',
                                      'documentation_url': RATE_DOCS}
            if kind == 'installation' and installation in self.rate_limits:
                self.rate_limits[installation] = left - 1
            else:
                self.rate_limit = left - 1
            headers.update({'X-RateLimit-Remaining': str(left - 1),
                            'X-RateLimit-Used': str(5000 - left + 1)})
            return 0, headers, {}

    # -- routes -------------------------------------------------------------
    def _route(self, method, path, query, headers, body):
        kind, installation = self._auth(headers)
        self.requests.append((method, path, kind))
        if kind == 'bad':
            return 401, {'message': 'Bad credentials'}, {}
        limited, rate_headers, rate_body = self._rate(kind, installation)
        if limited:
            return limited, rate_body, rate_headers
        status, answer, extra = self._dispatch(method, path, query, body, kind, installation)
        return status, answer, {**rate_headers, **extra}

    def _dispatch(self, method, path, query, body, kind, installation):
        m = re.match(r'^/app/installations/(\d+)/access_tokens$', path)
        if m and method == 'POST':
            if kind != 'app':
                return 401, {'message': 'A JSON web token could not be decoded'}, {}
            token = 'ghs_' + secrets.token_hex(16)
            expires = time.time() + self.token_lifetime
            self.tokens[token] = (int(m.group(1)), expires)
            return 201, {'token': token, 'expires_at': iso(expires)}, {}
        if path == '/search/issues' and method == 'GET':
            return self.search_issues(query, kind, installation)
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
        if rest == '' and method == 'GET':
            return 200, self.repository(name), {}
        return self._repo_route(method, self.repos[name], name, rest, query, body)

    def _repo_route(self, method, r, name, rest, query, body):
        for pattern, handler in _ROUTES:
            m = re.match(pattern, rest)
            if m and handler.__name__.split('_')[0].upper() == method:
                return handler(self, r, name, body, query, *m.groups())
        return 404, {'message': 'Not Found'}, {}

    def _visible(self, kind, installation, name) -> bool:
        if kind == 'installation':
            return self.installations.get(name) == installation
        return kind == 'personal' or not self.repos[name].get('private')

    def search_issues(self, query, kind, installation):
        """``q`` terms: a quoted phrase (in:body), ``repo:``, ``is:open``,
        ``type:pr``/``is:pr``."""
        q = (query.get('q') or [''])[0]
        phrases = re.findall(r'"([^"]+)"', q)
        terms = re.sub(r'"[^"]*"', ' ', q).split()
        items = []
        for name, r in self.repos.items():
            if any(t.startswith('repo:') and t[5:] != name for t in terms) or \
                    not self._visible(kind, installation, name):
                continue
            for pr in r['pulls'].values():
                if 'is:open' in terms and pr['state'] != 'open':
                    continue
                if all(p in (pr.get('body') or '') for p in phrases):
                    items.append({'number': pr['number'], 'title': pr['title'],
                                  'state': pr['state'], 'html_url': pr['html_url'],
                                  'pull_request': {'url': pr['url'],
                                                   'html_url': pr['html_url']},
                                  'repository_url': f'{payloads.API}/repos/{name}'})
        return 200, {'total_count': len(items), 'incomplete_results': False,
                     'items': _page(items, query)}, {}

    # -- pull requests --------------------------------------------------------
    def _refresh_mergeable(self, r, name, pr) -> None:
        """GitHub computes ``mergeable`` in the background: null on the
        first read after the head or base moved, then true/false."""
        if pr['state'] != 'open':
            pr['mergeable'], pr['mergeable_state'] = None, 'unknown'
            return
        if pr.get('mergeable') is None and self.lazy_mergeable and \
                not pr.pop('_computing', False):
            pr['_computing'] = True
            return
        conflict = None
        if os.path.isdir(os.path.join(self.git_root, name + '.git')):
            conflict = merging.conflicts(self.bare_repo(name), pr['base']['ref'],
                                         pr['head']['sha'])
        pr['mergeable'] = not conflict
        if pr.get('draft'):
            pr['mergeable_state'] = 'draft'
        elif conflict:
            pr['mergeable_state'] = 'dirty'
        elif merging.protection_blocker(r, pr):
            pr['mergeable_state'] = 'blocked'
        else:
            pr['mergeable_state'] = 'clean'

    def get_pulls(self, r, name, body, query):
        state = (query.get('state') or ['open'])[0]
        base = (query.get('base') or [None])[0]
        out = [_public(pr) for pr in r['pulls'].values()
               if (state == 'all' or pr['state'] == state) and
               (base is None or pr['base']['ref'] == base)]
        return 200, _page(out, query), {}

    def get_pull(self, r, name, body, query, number):
        pr = r['pulls'].get(int(number))
        if pr is None:
            return 404, {'message': 'Not Found'}, {}
        self._refresh_mergeable(r, name, pr)
        return 200, _public(pr), {}

    def get_files(self, r, name, body, query, number):
        return 200, _page([{'filename': f, 'status': 'modified'}
                           for f in r['files'].get(int(number), [])], query), {}

    def get_reviews(self, r, name, body, query, number):
        return 200, _page(r['reviews'].get(int(number), []), query), {}

    def post_reviews(self, r, name, body, query, number):
        state = {'APPROVE': 'APPROVED', 'REQUEST_CHANGES': 'CHANGES_REQUESTED'}.get(
            body.get('event'), 'COMMENTED')
        pr = r['pulls'][int(number)]
        review = payloads.review('zuul[bot]', state, pr['head']['sha'], self._new_id(),
                                 body.get('body', ''))
        r['reviews'].setdefault(int(number), []).append(review)
        return 200, review, {}

    def get_permission(self, r, name, body, query, login):
        return 200, {'permission': r['permissions'].get(login, 'read'),
                     'user': payloads.user(login)}, {}

    def get_status(self, r, name, body, query, sha):
        statuses = r['statuses'].get(sha, [])
        return 200, {'sha': sha, 'statuses': statuses, 'total_count': len(statuses),
                     'state': _combined(statuses)}, {}

    def post_status(self, r, name, body, query, sha):
        if body.get('state') not in ('error', 'failure', 'pending', 'success'):
            return 422, {'message': 'Validation Failed'}, {}
        now = time.time()
        status = {'state': body['state'], 'context': body.get('context', 'default'),
                  'description': body.get('description'), 'target_url':
                  body.get('target_url'), 'creator': payloads.user('zuul[bot]'),
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
        if len(body.get('actions') or ()) > 3:
            return 422, {'message': 'Validation Failed: at most 3 actions'}, {}
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
        return 200, [_public(pr) for pr in r['pulls'].values()
                     if pr['head']['sha'] == sha], {}

    def post_comment(self, r, name, body, query, number):
        comment = {'id': self._new_id(), 'body': body['body'],
                   'user': payloads.user('zuul[bot]'), 'created_at': iso(time.time())}
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

    # -- merging ----------------------------------------------------------------
    def put_merge(self, r, name, body, query, number):
        pr = r['pulls'].get(int(number))
        body = body or {}
        method = body.get('merge_method', 'merge')
        if pr is None:
            return 404, {'message': 'Not Found'}, {}
        if method not in ('merge', 'squash', 'rebase'):
            return 422, {'message': 'Invalid request.\n\nFor \'properties/merge_method\', '
                                    f'"{method}" is not a member of enum.'}, {}
        if pr['state'] != 'open':
            return merging.error(405, 'Pull Request is not mergeable')
        if body.get('sha') and body['sha'] != pr['head']['sha']:
            return merging.error(409, 'Head branch was modified. Review and try the merge '
                                      'again.')
        if pr.get('draft'):
            return merging.error(405, 'Pull Request is still a draft')
        if not r['settings'].get(merging.ALLOW_KEY[method], True):
            return merging.error(405, merging.NOT_ALLOWED[method])
        blocker = merging.protection_blocker(r, pr)
        if blocker:
            return merging.error(405, blocker)
        if r['fail_merges']:
            return merging.error(*r['fail_merges'].pop(0))
        sha, new = pr['head']['sha'], [pr['head']['sha']]
        bare = os.path.join(self.git_root, name + '.git')
        before = None
        if os.path.isdir(bare):
            before = merging.git(bare, 'rev-parse', f'refs/heads/{pr["base"]["ref"]}'
                                 ).stdout.strip()
            sha, new = merging.perform(bare, pr, method, body.get('commit_title'),
                                       body.get('commit_message'))
            if sha is None:
                return merging.error(405, 'Pull Request is not mergeable')
        now = iso(time.time())
        pr.update(state='closed', merged=True, merged_at=now, closed_at=now,
                  updated_at=now, merge_commit_sha=sha, mergeable=None,
                  merged_by=payloads.user('zuul[bot]'))
        r['merges'].append({'number': int(number), 'method': method})
        self._after_merge(name, pr, before, sha, new)
        return 200, {'merged': True, 'sha': sha,
                     'message': 'Pull Request successfully merged'}, {}

    def _after_merge(self, name, pr, before, sha, new) -> None:
        repo = self.repository(name)
        self.send('pull_request', payloads.pull_request_event('closed', repo, _public(pr),
                                                              'zuul[bot]'))
        if before is None:
            return
        bare = self.bare_repo(name)
        commits = []
        for commit in new:
            message = merging.git(bare, 'log', '-1', '--format=%B', commit).stdout.strip()
            commits.append({'id': commit, 'message': message,
                            **merging.commit_files(bare, commit)})
        self.send('push', payloads.push_event(repo, f'refs/heads/{pr["base"]["ref"]}',
                                              before, sha, 'zuul[bot]', commits))

    # -- branches ---------------------------------------------------------------
    def _heads(self, r, name) -> list[str]:
        bare = os.path.join(self.git_root, name + '.git')
        if r.get('branches'):
            return list(r['branches'])
        if not os.path.isdir(bare):
            return []
        return subprocess.run(['git', '-C', bare, 'for-each-ref',
                               '--format=%(refname:short)', 'refs/heads/'],
                              capture_output=True, text=True).stdout.split()

    def _branch(self, r, name, branch) -> dict:
        rule = merging.protection(r, branch)
        out = {'name': branch, 'protected': rule is not None}
        if rule is not None:
            out['protection'] = {'enabled': True, 'required_status_checks': {
                'enforcement_level': 'non_admins', 'contexts': rule['contexts'],
                'checks': [{'context': c, 'app_id': None} for c in rule['contexts']]}}
        return out

    def get_branches(self, r, name, body, query):
        wanted = (query.get('protected') or [None])[0]
        out = [self._branch(r, name, b) for b in self._heads(r, name)]
        if wanted is not None:
            out = [b for b in out if b['protected'] == (wanted == 'true')]
        return 200, _page(out, query), {}

    def get_branch(self, r, name, body, query, branch):
        branch = unquote(branch)
        if branch not in self._heads(r, name):
            return 404, {'message': 'Branch not found'}, {}
        return 200, self._branch(r, name, branch), {}

    def get_protection(self, r, name, body, query, branch):
        rule = merging.protection(r, unquote(branch))
        if rule is None:
            return 404, {'message': 'Branch not protected',
                         'documentation_url': 'https://docs.github.com/rest/branches/'
                                              'branch-protection#get-branch-protection'}, {}
        out = {'url': f'{payloads.API}/repos/{name}/branches/{branch}/protection',
               'required_status_checks': {'strict': False, 'contexts': rule['contexts'],
                                          'checks': [{'context': c, 'app_id': None}
                                                     for c in rule['contexts']]},
               'enforce_admins': {'enabled': False},
               'lock_branch': {'enabled': rule['lock']}}
        if rule['reviews']:
            out['required_pull_request_reviews'] = {
                'dismiss_stale_reviews': False, 'require_code_owner_reviews': False,
                'required_approving_review_count': rule['reviews']}
        return 200, out, {}


def _public(pr: dict) -> dict:
    return {k: v for k, v in pr.items() if not k.startswith('_')}


def _combined(statuses: list) -> str:
    states = {s['state'] for s in statuses}
    if states & {'failure', 'error'}:
        return 'failure'
    if not states or 'pending' in states:
        return 'pending'
    return 'success'


def _page(items: list, query) -> list:
    per_page = int((query.get('per_page') or [30])[0])
    page = int((query.get('page') or [1])[0])
    return items[(page - 1) * per_page: page * per_page]


def sign_sha1(secret: str, body: bytes) -> str:
    return 'sha1=' + hmac.new(secret.encode('utf8'), body, hashlib.sha1).hexdigest()


def sign_sha256(secret: str, body: bytes) -> str:
    return 'sha256=' + hmac.new(secret.encode('utf8'), body, hashlib.sha256).hexdigest()


def post_delivery(url: str, secret: str, kind: str, payload: dict,
                  signatures: tuple = ('sha1', 'sha256')) -> int:
    """POST one delivery as GitHub does (headers X-GitHub-Event,
    X-GitHub-Delivery, X-Hub-Signature and X-Hub-Signature-256);
    returns the HTTP status."""
    body = json.dumps(payload).encode()
    headers = {'X-GitHub-Event': kind, 'X-GitHub-Delivery': str(uuid.uuid4()),
               'Content-Type': 'application/json', 'User-Agent': 'GitHub-Hookshot/fake'}
    if 'sha1' in signatures:
        headers['X-Hub-Signature'] = sign_sha1(secret, body)
    if 'sha256' in signatures:
        headers['X-Hub-Signature-256'] = sign_sha256(secret, body)
    request = urllib.request.Request(url, data=body, method='POST', headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


_ROUTES = [
    (r'^/branches$', FakeGithub.get_branches),
    (r'^/branches/([^/]+)$', FakeGithub.get_branch),
    (r'^/branches/([^/]+)/protection$', FakeGithub.get_protection),
    (r'^/pulls$', FakeGithub.get_pulls),
    (r'^/pulls/(\d+)$', FakeGithub.get_pull),
    (r'^/pulls/(\d+)/files$', FakeGithub.get_files),
    (r'^/pulls/(\d+)/reviews$', FakeGithub.get_reviews),
    (r'^/pulls/(\d+)/reviews$', FakeGithub.post_reviews),
    (r'^/pulls/(\d+)/merge$', FakeGithub.put_merge),
    (r'^/collaborators/([^/]+)/permission$', FakeGithub.get_permission),
    (r'^/commits/([0-9a-f]+)/status$', FakeGithub.get_status),
    (r'^/commits/([0-9a-f]+)/check-runs$', FakeGithub.get_checkruns),
    (r'^/commits/([0-9a-f]+)/pulls$', FakeGithub.get_commitpulls),
    (r'^/statuses/([0-9a-f]+)$', FakeGithub.post_status),
    (r'^/check-runs$', FakeGithub.post_checkrun),
    (r'^/check-runs/(\d+)$', FakeGithub.patch_checkrun),
    (r'^/issues/(\d+)/comments$', FakeGithub.post_comment),
    (r'^/issues/(\d+)/labels$', FakeGithub.post_labels),
    (r'^/issues/(\d+)/labels/([^/]+)$', FakeGithub.delete_label),
]
