"""Merge requests in the stand-in: created from a source branch, moved
by pushes, approved, labeled, commented, rebased and merged as GitLab
does, each step leaving what GitLab leaves (notes, label events, diff
versions, project events) and sending its webhooks."""

from __future__ import annotations

import time

from tests.fakes.gitlab import hooks
from tests.fakes.gitlab.store import (
    DEVELOPER,
    ZERO_SHA,
    ApiError,
    GitError,
    Project,
    Store,
    iso,
)


class MergeRequests:
    def __init__(self, store: Store, deliverer):
        self.store = store
        self.deliverer = deliverer

    def _send(self, project: Project, payload: dict) -> None:
        if self.deliverer is not None:
            self.deliverer.send(project, payload)

    def _mr_hook(self, project, mr, user, action, **extra) -> None:
        self._send(project, hooks.merge_request_payload(self.store, project, mr, user,
                                                        action, **extra))

    # -- what GitLab answers ------------------------------------------------------
    def status(self, project: Project, mr: dict) -> tuple[str, str]:
        """(merge_status, detailed_merge_status)."""
        store = self.store
        if mr['state'] != 'opened':
            return 'can_be_merged', 'not_open'
        target = store.branch_head(project, mr['target_branch'])
        if target is None:
            return 'cannot_be_merged', 'broken_status'
        if store.merge_tree(project, target, mr['sha']) is None:
            return 'cannot_be_merged', 'conflict'
        if mr['draft']:
            return 'can_be_merged', 'draft_status'
        if len(mr['approvals']) < project.approvals_required:
            return 'can_be_merged', 'not_approved'
        if project.merge_method in ('ff', 'rebase_merge') and \
                not store.is_ancestor(project, target, mr['sha']):
            return 'can_be_merged', 'need_rebase'
        return 'can_be_merged', 'mergeable'

    def to_json(self, project: Project, mr: dict, rebase_in_progress: bool = False) -> dict:
        store = self.store
        author = store.users[mr['author_id']]
        merge_status, detailed = self.status(project, mr)
        out = {
            'id': mr['id'], 'iid': mr['iid'], 'project_id': project.id,
            'title': mr['title'], 'description': mr['description'], 'state': mr['state'],
            'created_at': iso(mr['created_at']), 'updated_at': iso(mr['updated_at']),
            'merged_at': iso(mr.get('merged_at')), 'closed_at': iso(mr.get('closed_at')),
            'target_branch': mr['target_branch'], 'source_branch': mr['source_branch'],
            'source_project_id': project.id, 'target_project_id': project.id,
            'author': hooks.user_json(author), 'labels': list(mr['labels']),
            'draft': mr['draft'], 'work_in_progress': mr['draft'],
            'merge_status': merge_status, 'detailed_merge_status': detailed,
            'has_conflicts': detailed == 'conflict', 'sha': mr['sha'],
            'merge_commit_sha': mr.get('merge_commit_sha'),
            'squash_commit_sha': mr.get('squash_commit_sha'), 'squash': mr['squash'],
            'merge_error': mr.get('merge_error'),
            'web_url': f'{store.web(project)}/-/merge_requests/{mr["iid"]}',
            'references': {'short': f'!{mr["iid"]}',
                           'full': f'{project.path_with_namespace}!{mr["iid"]}'},
            'diff_refs': {'base_sha': mr['base_sha'], 'head_sha': mr['sha'],
                          'start_sha': mr['base_sha']},
            'blocking_discussions_resolved': True,
        }
        if rebase_in_progress:
            out['rebase_in_progress'] = False
        return out

    def get(self, project: Project, iid) -> dict:
        try:
            return project.mrs[int(iid)]
        except (KeyError, ValueError):
            raise ApiError(404, '404 Not found') from None

    # -- changes ------------------------------------------------------------------
    def create(self, project: Project, user: dict, body: dict) -> dict:
        store = self.store
        source, target = body.get('source_branch'), body.get('target_branch')
        if not source or not target or not body.get('title'):
            raise ApiError(400, 'source_branch, target_branch, title are missing')
        sha = store.branch_head(project, source)
        if sha is None or store.branch_head(project, target) is None:
            raise ApiError(400, {'message': ['Invalid branch']})
        for other in project.mrs.values():
            if other['state'] == 'opened' and other['source_branch'] == source and \
                    other['target_branch'] == target:
                raise ApiError(409, [f'Another open merge request already exists for this '
                                     f'source branch: !{other["iid"]}'])
        now = time.time()
        iid = project.next_iid
        project.next_iid += 1
        title = body['title']
        mr = {'id': store.new_id(), 'iid': iid, 'title': title,
              'description': body.get('description') or '', 'source_branch': source,
              'target_branch': target, 'author_id': user['id'], 'state': 'opened',
              'created_at': now, 'updated_at': now, 'sha': sha,
              'base_sha': store.git(project, 'merge-base', sha,
                                    store.branch_head(project, target), check=False),
              'labels': _labels(body.get('labels')), 'approvals': {}, 'notes': [],
              'label_events': [], 'versions': [],
              'draft': title.lower().startswith(('draft:', '[draft]', 'wip:')),
              'squash': bool(body.get('squash'))}
        project.mrs[iid] = mr
        self._new_version(project, mr)
        store.git(project, 'update-ref', f'refs/merge-requests/{iid}/head', sha)
        store.record_event(project, user, 'opened', target_id=mr['id'], target_iid=iid,
                           target_type='MergeRequest', target_title=title)
        self._mr_hook(project, mr, user, 'open')
        return mr

    def _new_version(self, project: Project, mr: dict) -> None:
        mr['versions'].insert(0, {'id': self.store.new_id(), 'head_commit_sha': mr['sha'],
                                  'base_commit_sha': mr['base_sha'],
                                  'start_commit_sha': mr['base_sha'],
                                  'created_at': iso(time.time()),
                                  'merge_request_id': mr['id'], 'state': 'collected',
                                  'real_size': '1'})

    def _system_note(self, mr: dict, user: dict, body: str) -> None:
        mr['notes'].append({'id': self.store.new_id(), 'body': body, 'system': True,
                            'author': hooks.user_json(user), 'created_at': iso(time.time()),
                            'noteable_type': 'MergeRequest', 'noteable_iid': mr['iid']})

    def branch_moved(self, project: Project, branch: str, old: str, new: str,
                     user: dict) -> None:
        """A push moved ``branch``: the open requests from it get the new
        head (a new diff version, a system note, an ``update`` hook with
        ``oldrev``)."""
        for mr in project.mrs.values():
            if mr['state'] != 'opened' or mr['source_branch'] != branch or new == ZERO_SHA:
                continue
            self._move_head(project, mr, new, user)

    def _move_head(self, project, mr, new, user) -> None:
        store = self.store
        old = mr['sha']
        if old == new:
            return
        target = store.branch_head(project, mr['target_branch'])
        mr['sha'] = new
        mr['base_sha'] = store.git(project, 'merge-base', new, target, check=False)
        mr['updated_at'] = time.time()
        self._new_version(project, mr)
        store.git(project, 'update-ref', f'refs/merge-requests/{mr["iid"]}/head', new)
        count = len(store.commits_between(project, old, new))
        self._system_note(mr, user, f'added {count} commit{"s" if count != 1 else ""}')
        self._mr_hook(project, mr, user, 'update', oldrev=old)

    def update(self, project: Project, mr: dict, user: dict, body: dict) -> dict:
        before = list(mr['labels'])
        changes = {}
        for key in ('title', 'description'):
            if key in body and body[key] != mr[key]:
                changes[key] = {'previous': mr[key], 'current': body[key]}
                mr[key] = body[key]
        labels = list(mr['labels'])
        if 'labels' in body:
            labels = _labels(body['labels'])
        labels += [x for x in _labels(body.get('add_labels')) if x not in labels]
        labels = [x for x in labels if x not in _labels(body.get('remove_labels'))]
        if labels != before:
            mr['labels'] = labels
            changes['labels'] = {'previous': [hooks.label_json(x) for x in before],
                                 'current': [hooks.label_json(x) for x in labels]}
            now = iso(time.time())
            for name, action in [(x, 'add') for x in labels if x not in before] + \
                                [(x, 'remove') for x in before if x not in labels]:
                mr['label_events'].append({'id': self.store.new_id(), 'action': action,
                                           'created_at': now, 'user': hooks.user_json(user),
                                           'label': {'id': 1, 'name': name},
                                           'resource_type': 'MergeRequest',
                                           'resource_id': mr['id']})
        event = body.get('state_event')
        if event == 'close' and mr['state'] == 'opened':
            return self._set_state(project, mr, user, 'closed', 'close', 'closed')
        if event == 'reopen' and mr['state'] == 'closed':
            return self._set_state(project, mr, user, 'opened', 'reopen', 'reopened')
        if changes:
            mr['updated_at'] = time.time()
            self._mr_hook(project, mr, user, 'update', changes=changes)
        return mr

    def _set_state(self, project, mr, user, state, action, event_name) -> dict:
        mr['state'] = state
        mr['updated_at'] = time.time()
        mr['closed_at'] = time.time() if state == 'closed' else None
        self.store.record_event(project, user, event_name, target_id=mr['id'],
                                target_iid=mr['iid'], target_type='MergeRequest')
        self._mr_hook(project, mr, user, action)
        return mr

    def note(self, project: Project, mr: dict, user: dict, body: str) -> dict:
        if not body:
            raise ApiError(400, 'body is missing')
        note = {'id': self.store.new_id(), 'body': body, 'system': False,
                'author': hooks.user_json(user), 'created_at': iso(time.time()),
                'noteable_type': 'MergeRequest', 'noteable_iid': mr['iid']}
        mr['notes'].append(note)
        self.store.record_event(project, user, 'commented on', target_id=note['id'],
                                target_type='Note', note=dict(note))
        self._send(project, hooks.note_payload(self.store, project, mr, note, user))
        return note

    def approve(self, project: Project, mr: dict, user: dict, sha: str | None,
                approve: bool) -> None:
        if self.store.access(project, user) < DEVELOPER:
            raise ApiError(403, '403 Forbidden')
        if mr['state'] != 'opened':
            raise ApiError(405, '405 Method Not Allowed')
        if approve and sha and sha != mr['sha']:
            raise ApiError(409, 'SHA does not match HEAD of source branch')
        was = self.approved(project, mr)
        if approve:
            if user['id'] in mr['approvals']:
                raise ApiError(401, '401 Unauthorized')
            mr['approvals'][user['id']] = time.time()
            self._system_note(mr, user, 'approved this merge request')
            self.store.record_event(project, user, 'approved', target_id=mr['id'],
                                    target_iid=mr['iid'], target_type='MergeRequest')
        else:
            if user['id'] not in mr['approvals']:
                raise ApiError(404, '404 Not found')
            del mr['approvals'][user['id']]
            self._system_note(mr, user, 'unapproved this merge request')
        self._mr_hook(project, mr, user, 'approval' if approve else 'unapproval')
        now = self.approved(project, mr)
        if now != was:
            self._mr_hook(project, mr, user, 'approved' if now else 'unapproved')

    def approved(self, project: Project, mr: dict) -> bool:
        return len(mr['approvals']) >= max(1, project.approvals_required)

    def approvals_json(self, project: Project, mr: dict) -> dict:
        store = self.store
        return {'id': mr['id'], 'iid': mr['iid'], 'project_id': project.id,
                'state': mr['state'], 'approved': self.approved(project, mr),
                'approvals_required': project.approvals_required,
                'approvals_left': max(0, project.approvals_required - len(mr['approvals'])),
                'approved_by': [{'user': hooks.user_json(store.users[uid]),
                                 'approved_at': iso(when)}
                                for uid, when in mr['approvals'].items()]}

    # -- rebase and merge -----------------------------------------------------------
    def rebase(self, project: Project, mr: dict, user: dict) -> None:
        store = self.store
        if store.access(project, user) < DEVELOPER:
            raise ApiError(403, '403 Forbidden')
        if mr['state'] != 'opened':
            raise ApiError(405, '405 Method Not Allowed')
        target = store.branch_head(project, mr['target_branch'])
        mr['merge_error'] = None
        if store.is_ancestor(project, target, mr['sha']):
            return
        base = store.git(project, 'merge-base', target, mr['sha'])
        try:
            new = store.cherry_pick_onto(project, target, base, mr['sha'])
        except GitError as exc:
            mr['merge_error'] = f'Rebase failed: {exc}'
            return
        old = store.branch_head(project, mr['source_branch'])
        store.git(project, 'update-ref', f'refs/heads/{mr["source_branch"]}', new)
        self.pushed(project, user, f'refs/heads/{mr["source_branch"]}', old, new)

    def pushed(self, project: Project, user: dict, ref: str, old: str, new: str) -> None:
        """What follows any move of a branch or tag (a git push, a merge, a
        rebase): the project event, the push hook, the requests from it."""
        store = self.store
        kind = 'tag' if ref.startswith('refs/tags/') else 'branch'
        name = ref.split('/', 2)[2]
        verb = 'deleted' if new == ZERO_SHA else ('pushed new' if old == ZERO_SHA
                                                  else 'pushed to')
        commits = [] if new == ZERO_SHA else store.commits_between(project, old, new)
        store.record_event(project, user, verb, push_data={
            'commit_count': len(commits),
            'action': {'deleted': 'removed', 'pushed new': 'created'}.get(verb, 'pushed'),
            'ref_type': kind, 'commit_from': None if old == ZERO_SHA else old,
            'commit_to': None if new == ZERO_SHA else new, 'ref': name, 'ref_count': None,
            'commit_title': commits[0]['title'] if commits else None})
        self._send(project, hooks.push_payload(store, project, user, ref, old, new, commits))
        if kind == 'branch':
            self.branch_moved(project, name, old, new, user)

    def merge(self, project: Project, mr: dict, user: dict, body: dict) -> dict:
        store = self.store
        level = store.access(project, user)
        protected = project.protected.get(mr['target_branch'])
        if level < DEVELOPER or (protected and level < protected['merge']):
            raise ApiError(401, '401 Unauthorized')
        merge_status, detailed = self.status(project, mr)
        if detailed in ('not_open', 'draft_status', 'not_approved'):
            raise ApiError(405, '405 Method Not Allowed')
        if body.get('sha') and body['sha'] != mr['sha']:
            raise ApiError(409, f'SHA does not match HEAD of source branch: {mr["sha"]}')
        if detailed in ('conflict', 'need_rebase', 'broken_status'):
            raise ApiError(406, 'Branch cannot be merged')
        squash = {'always': True, 'never': False}.get(project.squash_option,
                                                        _truthy(body.get('squash'),
                                                                mr['squash']))
        target = store.branch_head(project, mr['target_branch'])
        head = mr['sha']
        if squash:
            base = target if project.merge_method == 'ff' else \
                store.git(project, 'merge-base', target, head)
            head = store.git(project, 'commit-tree', f'{head}^{{tree}}', '-p', base, '-m',
                             body.get('squash_commit_message') or mr['title'])
            mr['squash_commit_sha'] = head
        if project.merge_method == 'ff':
            new = head
            mr['merge_commit_sha'] = None
        else:
            tree = store.merge_tree(project, target, head)
            message = body.get('merge_commit_message') or (
                f"Merge branch '{mr['source_branch']}' into '{mr['target_branch']}'\n\n"
                f"{mr['title']}\n\nSee merge request "
                f"{project.path_with_namespace}!{mr['iid']}")
            new = store.git(project, 'commit-tree', tree, '-p', target, '-p', head, '-m',
                            message)
            mr['merge_commit_sha'] = new
        store.git(project, 'update-ref', f'refs/heads/{mr["target_branch"]}', new, target)
        mr.update(state='merged', merged_at=time.time(), updated_at=time.time())
        store.record_event(project, user, 'accepted', target_id=mr['id'],
                           target_iid=mr['iid'], target_type='MergeRequest')
        self.pushed(project, user, f'refs/heads/{mr["target_branch"]}', target, new)
        self._mr_hook(project, mr, user, 'merge')
        return mr


def _labels(value) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(',')
    return [x.strip() for x in items if x and x.strip()]


def _truthy(value, default: bool) -> bool:
    if value is None:
        return default
    return str(value).lower() in ('1', 'true', 'yes')
