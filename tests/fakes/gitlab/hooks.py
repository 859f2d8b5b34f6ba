"""Webhooks as GitLab sends them: the documented payloads of merge
request, note (comment), push and tag push events, POSTed to every hook
of the project that asked for that kind, with ``X-Gitlab-Event``,
``X-Gitlab-Token``, ``X-Gitlab-Event-UUID`` and ``X-Gitlab-Instance``.
Deliveries go out one at a time from a worker thread (after the API
answer that caused them); a failed delivery is recorded, not retried."""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
import uuid

from tests.fakes.gitlab.store import Project, Store, iso

HEADERS = {'merge_request': ('Merge Request Hook', 'merge_requests_events'),
           'note': ('Note Hook', 'note_events'),
           'push': ('Push Hook', 'push_events'),
           'tag_push': ('Tag Push Hook', 'tag_push_events')}


def user_json(user: dict) -> dict:
    return {'id': user['id'], 'name': user['name'], 'username': user['username'],
            'avatar_url': None, 'email': user['email']}


def project_json(store: Store, project: Project) -> dict:
    web = store.web(project)
    ssh = f'git@{store.web_url.split("://", 1)[-1].split("/")[0]}:' \
          f'{project.path_with_namespace}.git'
    return {'id': project.id, 'name': project.path, 'description': '', 'web_url': web,
            'avatar_url': None, 'git_ssh_url': ssh, 'git_http_url': f'{web}.git',
            'namespace': project.namespace, 'visibility_level': 0,
            'path_with_namespace': project.path_with_namespace,
            'default_branch': project.default_branch, 'ci_config_path': '',
            'homepage': web, 'url': ssh, 'ssh_url': ssh, 'http_url': f'{web}.git'}


def repository_json(store: Store, project: Project) -> dict:
    web = store.web(project)
    return {'name': project.path, 'url': f'{web}.git', 'description': '', 'homepage': web}


def commit_json(store: Store, project: Project, commit: dict) -> dict:
    return {'id': commit['id'], 'message': commit['message'], 'title': commit['title'],
            'timestamp': commit['timestamp'],
            'url': f'{store.web(project)}/-/commit/{commit["id"]}',
            'author': {'name': commit['author_name'], 'email': commit['author_email']}}


def label_json(name: str) -> dict:
    return {'id': abs(hash(name)) % 100000, 'title': name, 'color': '#428BCA',
            'project_id': None, 'created_at': None, 'updated_at': None,
            'template': False, 'description': None, 'type': 'ProjectLabel',
            'group_id': None}


def mr_attributes(store: Store, project: Project, mr: dict) -> dict:
    last = store.commits_between(project, None, mr['sha'])[:1]
    return {
        'id': mr['id'], 'iid': mr['iid'], 'target_branch': mr['target_branch'],
        'source_branch': mr['source_branch'], 'source_project_id': project.id,
        'target_project_id': project.id, 'author_id': mr['author_id'],
        'title': mr['title'], 'description': mr['description'],
        'created_at': iso(mr['created_at']), 'updated_at': iso(mr['updated_at']),
        'state': mr['state'], 'merge_status': 'unchecked', 'draft': mr['draft'],
        'work_in_progress': mr['draft'], 'blocking_discussions_resolved': True,
        'url': f'{store.web(project)}/-/merge_requests/{mr["iid"]}',
        'last_commit': commit_json(store, project, last[0]) if last else None,
        'labels': [label_json(x) for x in mr['labels']],
        'merge_commit_sha': mr.get('merge_commit_sha'), 'head_pipeline_id': None,
    }


def merge_request_payload(store: Store, project: Project, mr: dict, user: dict,
                          action: str, oldrev: str | None = None,
                          changes: dict | None = None) -> dict:
    attrs = dict(mr_attributes(store, project, mr), action=action)
    if oldrev:
        attrs['oldrev'] = oldrev
    return {'object_kind': 'merge_request', 'event_type': 'merge_request',
            'user': user_json(user), 'project': project_json(store, project),
            'repository': repository_json(store, project), 'object_attributes': attrs,
            'labels': attrs['labels'], 'changes': changes or {}}


def note_payload(store: Store, project: Project, mr: dict, note: dict, user: dict) -> dict:
    return {'object_kind': 'note', 'event_type': 'note', 'user': user_json(user),
            'project_id': project.id, 'project': project_json(store, project),
            'repository': repository_json(store, project),
            'object_attributes': {
                'id': note['id'], 'note': note['body'], 'noteable_type': 'MergeRequest',
                'author_id': user['id'], 'created_at': note['created_at'],
                'updated_at': note['created_at'], 'project_id': project.id,
                'noteable_id': mr['id'], 'system': False, 'action': 'create',
                'url': f'{store.web(project)}/-/merge_requests/{mr["iid"]}#note_{note["id"]}'},
            'merge_request': mr_attributes(store, project, mr)}


def push_payload(store: Store, project: Project, user: dict, ref: str, before: str,
                 after: str, commits: list[dict]) -> dict:
    tag = ref.startswith('refs/tags/')
    return {'object_kind': 'tag_push' if tag else 'push',
            'event_name': 'tag_push' if tag else 'push', 'before': before, 'after': after,
            'ref': ref, 'ref_protected': False,
            'checkout_sha': None if after == '0' * 40 else after,
            'user_id': user['id'], 'user_name': user['name'],
            'user_username': user['username'], 'user_email': user['email'],
            'user_avatar': None, 'project_id': project.id,
            'project': project_json(store, project),
            'commits': [commit_json(store, project, c) for c in commits[:20]],
            'total_commits_count': len(commits),
            'repository': repository_json(store, project)}


class Deliverer:
    """Sends each project's webhooks, in order, from one thread."""

    def __init__(self, instance_url: str):
        self.instance_url = instance_url
        self.log: list[dict] = []
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True, name='webhooks')
        self._thread.start()

    def send(self, project: Project, payload: dict) -> None:
        header, flag = HEADERS[payload['object_kind']]
        for hook in project.hooks:
            if hook.get(flag, flag == 'push_events'):
                self._queue.put((hook, header, payload))

    def pending(self) -> int:
        return self._queue.unfinished_tasks

    def _run(self) -> None:
        while True:
            hook, header, payload = self._queue.get()
            try:
                self._deliver(hook, header, payload)
            finally:
                self._queue.task_done()

    def _deliver(self, hook: dict, header: str, payload: dict) -> None:
        body = json.dumps(payload).encode()
        uid = str(uuid.uuid4())
        headers = {'Content-Type': 'application/json', 'User-Agent': 'GitLab/16.11.0',
                   'X-Gitlab-Event': header, 'X-Gitlab-Event-UUID': uid,
                   'X-Gitlab-Webhook-UUID': str(hook['uuid']),
                   'X-Gitlab-Instance': self.instance_url}
        if hook.get('token'):
            headers['X-Gitlab-Token'] = hook['token']
        entry = {'hook_id': hook['id'], 'event': header, 'uuid': uid, 'time': time.time(),
                 'kind': payload.get('object_kind'),
                 'action': (payload.get('object_attributes') or {}).get('action'),
                 'iid': (payload.get('object_attributes') or {}).get('iid')}
        request = urllib.request.Request(hook['url'], data=body, headers=headers,
                                         method='POST')
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                entry['status'] = answer.status
        except urllib.error.HTTPError as err:
            entry['status'] = err.code
        except OSError as exc:
            entry['status'] = None
            entry['error'] = str(exc)
        self.log.append(entry)
