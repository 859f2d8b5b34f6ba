"""How the fake GitHub decides and performs ``PUT /pulls/{n}/merge``, as
GitHub documents and answers it.

Refusals carry GitHub's status codes and messages: 405 for a draft, a
conflict, unmet branch protection (required status checks, approving
reviews, a locked branch) or a merge method the repository does not
allow; 409 when the head moved; 422 for an unknown method.

The three methods act on the bare repository as GitHub does:
- ``merge``: a merge commit (parents: the branch, the head); title
  ``commit_title`` (default ``Merge pull request #N from <head label>``),
  body ``commit_message`` (default the pull request's title);
- ``squash``: one commit on the branch with the merged tree; title
  ``commit_title`` (default ``<PR title> (#N)``), body ``commit_message``
  (default the list of the squashed commits' messages); author the PR's;
- ``rebase``: every commit of the pull request replayed on the branch,
  authors and messages kept, committer GitHub (``commit_title`` and
  ``commit_message`` do not apply, as GitHub documents).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

DOCS = 'https://docs.github.com/rest/pulls/pulls#merge-a-pull-request'
GITHUB_ID = {'GIT_COMMITTER_NAME': 'GitHub', 'GIT_COMMITTER_EMAIL': 'noreply@github.com'}
NOT_ALLOWED = {'merge': 'Merge commits are not allowed on this repository.',
               'squash': 'Squash merges are not allowed on this repository.',
               'rebase': 'Rebase merges are not allowed on this repository.'}
ALLOW_KEY = {'merge': 'allow_merge_commit', 'squash': 'allow_squash_merge',
             'rebase': 'allow_rebase_merge'}


def error(status: int, message: str):
    return status, {'message': message, 'documentation_url': DOCS}, {}


def protection(r: dict, branch: str) -> dict | None:
    """A branch's protection rule: ``contexts`` (required status checks),
    ``reviews`` (approving reviews needed), ``lock`` (read-only)."""
    rule = r['protected'].get(branch)
    if rule is None:
        return None
    if isinstance(rule, (list, tuple)):
        return {'contexts': list(rule), 'reviews': 0, 'lock': False}
    return {'contexts': list(rule.get('contexts') or ()), 'reviews': int(rule.get('reviews')
                                                                           or 0),
            'lock': bool(rule.get('lock'))}


def check_states(r: dict, sha: str) -> dict:
    """context -> state of the head's latest statuses and check runs."""
    out = {}
    for s in reversed(r['statuses'].get(sha, [])):
        out[s['context']] = s['state']
    for run in r['check_runs'].get(sha, []):
        out[run['name']] = run.get('conclusion') or 'pending'
    return out


def approvals(r: dict, number: int) -> tuple[int, bool]:
    """Approving reviews by users with write access (latest per user),
    and whether one of them requests changes."""
    latest = {}
    for rev in r['reviews'].get(number, []):
        if rev['state'] in ('APPROVED', 'CHANGES_REQUESTED', 'DISMISSED'):
            latest[rev['user']['login']] = rev['state']
    writers = {login for login, perm in r['permissions'].items()
               if perm in ('write', 'maintain', 'admin')}
    approved = sum(1 for login, state in latest.items()
                   if state == 'APPROVED' and login in writers)
    blocked = any(state == 'CHANGES_REQUESTED' and login in writers
                  for login, state in latest.items())
    return approved, blocked


def protection_blocker(r: dict, pr: dict) -> str | None:
    """GitHub's message for the first unmet protection rule."""
    rule = protection(r, pr['base']['ref'])
    if rule is None:
        return None
    if rule['lock']:
        return 'Repository rule violations found\n\nCannot update this protected ref. ' \
               'The branch is locked.'
    states = check_states(r, pr['head']['sha'])
    missing = [c for c in rule['contexts'] if c not in states or
               states[c] in ('pending', 'queued', 'in_progress')]
    failing = [c for c in rule['contexts'] if states.get(c) in ('failure', 'error',
                                                               'cancelled', 'timed_out')]
    if failing:
        return f'Required status check "{failing[0]}" is failing.'
    if len(missing) == 1:
        return f'Required status check "{missing[0]}" is expected.'
    if missing:
        return f'{len(missing)} of {len(rule["contexts"])} required status checks are ' \
               f'expected.'
    approved, changes_requested = approvals(r, pr['number'])
    if changes_requested:
        return 'Changes have been requested by a reviewer with write access.'
    if approved < rule['reviews']:
        n = rule['reviews']
        return f'At least {n} approving review{" is" if n == 1 else "s are"} required by ' \
               f'reviewers with write access.'
    return None


def git(bare: str, *args, env=None, cwd=None) -> subprocess.CompletedProcess:
    base = ['git'] if cwd else ['git', '-C', bare]
    return subprocess.run([*base, *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, **GITHUB_ID, **(env or {})))


def conflicts(bare: str, branch: str, head: str) -> bool | None:
    """Whether ``head`` conflicts with ``branch`` (None: unknown)."""
    base = git(bare, 'rev-parse', '--verify', '-q', f'refs/heads/{branch}').stdout.strip()
    if not base or git(bare, 'cat-file', '-e', head).returncode != 0:
        return None
    return git(bare, 'merge-tree', '--write-tree', base, head).returncode != 0


def _author_env(bare: str, commit: str) -> dict:
    name, email, date = git(bare, 'log', '-1', '--format=%an%x00%ae%x00%aI',
                            commit).stdout.strip().split('\x00')
    return {'GIT_AUTHOR_NAME': name, 'GIT_AUTHOR_EMAIL': email, 'GIT_AUTHOR_DATE': date}


def perform(bare: str, pr: dict, method: str, title: str | None,
            message: str | None) -> tuple[str | None, list[str]]:
    """Merge; returns (the branch's new head, the new commits oldest
    first), or (None, []) on a conflict."""
    branch, head, number = pr['base']['ref'], pr['head']['sha'], pr['number']
    base = git(bare, 'rev-parse', f'refs/heads/{branch}').stdout.strip()
    if method == 'rebase':
        return _rebase(bare, branch, base, head)
    tree = git(bare, 'merge-tree', '--write-tree', base, head)
    if tree.returncode != 0:
        return None, []
    if method == 'merge':
        title = title or f'Merge pull request #{number} from ' \
                         f'{pr["head"]["label"].replace(":", "/")}'
        body = pr['title'] if message is None else message
        parents = ['-p', base, '-p', head]
        env = {'GIT_AUTHOR_NAME': 'GitHub', 'GIT_AUTHOR_EMAIL': 'noreply@github.com'}
    else:
        title = title or f'{pr["title"]} (#{number})'
        if message is None:
            logs = git(bare, 'log', '--reverse', '--format=%B%x00', f'{base}..{head}').stdout
            body = '\n\n'.join(f'* {m.strip()}' for m in logs.split('\x00') if m.strip())
        else:
            body = message
        parents = ['-p', base]
        env = _author_env(bare, head)
    text = title if not body else f'{title}\n\n{body}'
    sha = git(bare, 'commit-tree', tree.stdout.split()[0], *parents, '-m', text,
              env=env).stdout.strip()
    git(bare, 'update-ref', f'refs/heads/{branch}', sha, base)
    return sha, [sha]


def _rebase(bare: str, branch: str, base: str, head: str) -> tuple[str | None, list[str]]:
    work = tempfile.mkdtemp(prefix='fake-github-rebase-')
    try:
        if git(bare, 'clone', '-q', '--shared', '--no-checkout', bare, work,
               cwd=work).returncode:
            return None, []
        git(bare, 'fetch', '-q', 'origin', head, cwd=work)
        git(bare, 'checkout', '-q', base, cwd=work)
        commits = git(bare, 'rev-list', '--reverse', '--no-merges', f'{base}..{head}',
                      cwd=work).stdout.split()
        for commit in commits:
            picked = git(bare, 'cherry-pick', '--allow-empty', '--keep-redundant-commits',
                         commit, cwd=work)
            if picked.returncode != 0:
                return None, []
        new_head = git(bare, 'rev-parse', 'HEAD', cwd=work).stdout.strip()
        new = git(bare, 'rev-list', '--reverse', f'{base}..{new_head}', cwd=work).stdout.split()
        git(bare, 'push', '-q', 'origin', f'{new_head}:refs/heads/{branch}', cwd=work)
        return new_head, new
    finally:
        shutil.rmtree(work, ignore_errors=True)


def commit_files(bare: str, sha: str) -> dict:
    """added/removed/modified of one commit against its first parent, as
    a push delivery lists them."""
    out = {'added': [], 'removed': [], 'modified': []}
    diff = git(bare, 'diff-tree', '--no-commit-id', '-r', '--name-status', '-m',
               '--first-parent', '--root', sha).stdout.splitlines()
    for line in diff:
        status, _, path = line.partition('\t')
        key = {'A': 'added', 'D': 'removed'}.get(status[:1], 'modified')
        if path and path not in out[key]:
            out[key].append(path)
    return out
