"""GitHub's objects and webhook payloads, from real ones.

Every object the fake GitHub serves and every delivery it sends starts as
a real GitHub payload (tests/fixtures/github-webhooks/, copied from the
shared corpus; see PROVENANCE.md there) with the fields that name things
(repository, pull request number, head, base, users, timestamps) set to
the fake's state. What GitHub sends and we do not read stays as GitHub
sent it, so the driver meets payloads of the real size and shape.
"""

from __future__ import annotations

import copy
import functools
import json
import pathlib
import time
from datetime import datetime, timezone

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'github-webhooks'
WEB = 'https://github.com'
API = 'https://api.github.com'


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


@functools.lru_cache(maxsize=None)
def _template(name: str) -> str:
    return (FIXTURES / f'{name}.json').read_text()


def template(name: str) -> dict:
    """A fresh copy of the real payload ``<event>.<action>``."""
    return json.loads(_template(name))


def user(login: str) -> dict:
    base = copy.deepcopy(template('pull_request.opened')['sender'])
    base.update(login=login, id=abs(hash(login)) % 10 ** 8,
                url=f'{API}/users/{login}', html_url=f'{WEB}/{login}')
    return base


def repository(name: str, private: bool = False, settings: dict | None = None) -> dict:
    repo = template('pull_request.opened')['repository']
    owner, _, short = name.partition('/')
    repo.update(name=short, full_name=name, private=private, owner=user(owner),
                html_url=f'{WEB}/{name}', url=f'{API}/repos/{name}',
                default_branch='main', clone_url=f'{WEB}/{name}.git')
    repo.update(settings or {})
    return repo


def pull_request(repo: dict, number: int, head_sha: str, branch: str, title: str,
                 body: str | None, login: str, draft: bool = False) -> dict:
    """A pull request as ``GET /repos/{repo}/pulls/{number}`` returns it."""
    pr = template('pull_request.opened')['pull_request']
    name = repo['full_name']
    now = iso(time.time())
    pr.update(number=number, id=10 ** 6 + number, title=title, body=body,
              state='open', draft=draft, merged=False, merged_at=None,
              merge_commit_sha=None, closed_at=None, created_at=now, updated_at=now,
              user=user(login), labels=[], mergeable=None, mergeable_state='unknown',
              html_url=f'{WEB}/{name}/pull/{number}', url=f'{API}/repos/{name}/pulls/{number}',
              issue_url=f'{API}/repos/{name}/issues/{number}',
              statuses_url=f'{API}/repos/{name}/statuses/{head_sha}')
    pr['head'].update(sha=head_sha, ref=f'feature-{number}', label=f'{login}:feature-{number}',
                      repo=copy.deepcopy(repo), user=user(login))
    pr['base'].update(ref=branch, label=f'{name.split("/")[0]}:{branch}',
                      repo=copy.deepcopy(repo))
    return pr


def review(login: str, state: str, commit_id: str, review_id: int, body: str = '') -> dict:
    out = template('pull_request_review.submitted')['review']
    out.update(id=review_id, user=user(login), state=state.upper(), commit_id=commit_id,
               body=body or None, submitted_at=iso(time.time()))
    return out


def pull_request_event(action: str, repo: dict, pr: dict, sender: str, **extra) -> dict:
    """A ``pull_request`` delivery; ``edited`` (not in the collection)
    is the opened payload with GitHub's ``changes`` object."""
    name = action if action != 'edited' else 'opened'
    payload = template(f'pull_request.{name}')
    payload.update(action=action, number=pr['number'], pull_request=copy.deepcopy(pr),
                   repository=copy.deepcopy(repo), sender=user(sender))
    payload.update(extra)
    return payload


def review_event(action: str, repo: dict, pr: dict, the_review: dict) -> dict:
    payload = template(f'pull_request_review.{action}')
    payload.update(review=copy.deepcopy(the_review), pull_request=copy.deepcopy(pr),
                   repository=copy.deepcopy(repo), sender=the_review['user'])
    return payload


def push_event(repo: dict, ref: str, before: str, after: str, sender: str,
               commits: list[dict]) -> dict:
    """A ``push`` delivery: ``commits`` are (id, message, added, removed,
    modified) dicts of the new commits, oldest first (GitHub lists at most
    20 and sets ``head_commit`` to the last)."""
    zero = '0' * 40
    payload = template('push.new-branch')
    real = payload['commits'][0]
    listed = []
    for c in commits[-20:]:
        entry = copy.deepcopy(real)
        entry.update(id=c['id'], tree_id=c.get('tree_id', real['tree_id']),
                     message=c['message'], added=c.get('added', []),
                     removed=c.get('removed', []), modified=c.get('modified', []),
                     url=f'{WEB}/{repo["full_name"]}/commit/{c["id"]}')
        listed.append(entry)
    payload.update(ref=ref, before=before, after=after, created=before == zero,
                   deleted=after == zero, forced=False, commits=listed,
                   head_commit=listed[-1] if listed else None,
                   compare=f'{WEB}/{repo["full_name"]}/compare/{before[:12]}...{after[:12]}',
                   repository=copy.deepcopy(repo), pusher={'name': sender, 'email': None},
                   sender=user(sender))
    payload['base_ref'] = None
    return payload


def check_run_event(action: str, repo: dict, run: dict, pr: dict, sender: str,
                    identifier: str | None = None) -> dict:
    payload = template(f'check_run.{action}')
    full = copy.deepcopy(payload['check_run'])
    full.update(run)
    full['pull_requests'] = [{'number': pr['number'], 'id': pr['id'], 'url': pr['url'],
                              'head': {'ref': pr['head']['ref'], 'sha': pr['head']['sha']},
                              'base': {'ref': pr['base']['ref'],
                                       'sha': pr['base'].get('sha')}}]
    payload.update(check_run=full, repository=copy.deepcopy(repo), sender=user(sender))
    if identifier is not None:
        payload['requested_action'] = {'identifier': identifier}
    return payload


def installation_event(action: str, installation_id: int, repos: list[str],
                       sender: str = 'admin') -> dict:
    """``installation`` (created/deleted) or ``installation_repositories``
    (added/removed), written to GitHub's documented schema."""
    listed = [{'id': abs(hash(r)) % 10 ** 8, 'name': r.split('/')[1], 'full_name': r,
               'private': False} for r in repos]
    payload = {'action': action,
               'installation': {'id': installation_id, 'account': user(sender),
                                'repository_selection': 'selected',
                                'app_id': 1, 'target_type': 'Organization'},
               'sender': user(sender)}
    if action in ('created', 'deleted'):
        payload['repositories'] = listed
    else:
        payload.update(repository_selection='selected',
                       repositories_added=listed if action == 'added' else [],
                       repositories_removed=listed if action == 'removed' else [])
    return payload
