"""The REST API v4 routes of the stand-in: what a request may do is
decided as GitLab decides it (the token's user and its access level on
the project), answers and errors have GitLab's shapes, lists are paged
with GitLab's ``X-Page``/``X-Next-Page``/``X-Total`` headers."""

from __future__ import annotations

import re
import urllib.parse

from tests.fakes.gitlab import hooks
from tests.fakes.gitlab.mergerequests import MergeRequests
from tests.fakes.gitlab.store import (
    DEVELOPER,
    GUEST,
    MAINTAINER,
    REPORTER,
    ZERO_SHA,
    ApiError,
    Project,
    Store,
    iso,
    parse_time,
)


class Request:
    def __init__(self, method: str, path: str, query: dict, body: dict, user: dict | None):
        self.method = method
        self.path = path
        self.query = query
        self.body = body
        self.user = user

    def arg(self, name: str, default=None):
        if name in self.body:
            return self.body[name]
        values = self.query.get(name)
        return values[0] if values else default


class Api:
    def __init__(self, store: Store, deliverer):
        self.store = store
        self.mrs = MergeRequests(store, deliverer)
        self.routes = [(method, re.compile('^' + pattern + '$'), handler)
                       for method, pattern, handler in self._table()]

    def _table(self):
        mr = r'/projects/([^/]+)/merge_requests/(\d+)'
        return [
            ('GET', r'/user', self.get_user),
            ('POST', r'/users', self.post_user),
            ('POST', r'/users/(\d+)/personal_access_tokens', self.post_token),
            ('POST', r'/groups', self.post_group),
            ('POST', r'/projects', self.post_project),
            ('GET', r'/projects/([^/]+)', self.get_project),
            ('PUT', r'/projects/([^/]+)', self.put_project),
            ('POST', r'/projects/([^/]+)/members', self.post_member),
            ('POST', r'/projects/([^/]+)/hooks', self.post_hook),
            ('GET', r'/projects/([^/]+)/hooks', self.get_hooks),
            ('GET', r'/projects/([^/]+)/events', self.get_events),
            ('GET', r'/projects/([^/]+)/protected_branches', self.get_protected),
            ('POST', r'/projects/([^/]+)/protected_branches', self.post_protected),
            ('DELETE', r'/projects/([^/]+)/protected_branches/([^/]+)', self.delete_protected),
            ('GET', r'/projects/([^/]+)/repository/branches', self.get_branches),
            ('POST', r'/projects/([^/]+)/repository/tags', self.post_tag),
            ('GET', r'/projects/([^/]+)/merge_requests', self.get_mrs),
            ('POST', r'/projects/([^/]+)/merge_requests', self.post_mr),
            ('GET', mr, self.get_mr),
            ('PUT', mr, self.put_mr),
            ('GET', mr + r'/(?:diffs|changes)', self.get_diffs),
            ('GET', mr + r'/versions', self.get_versions),
            ('GET', mr + r'/approvals', self.get_approvals),
            ('POST', mr + r'/approve', self.post_approve),
            ('POST', mr + r'/unapprove', self.post_unapprove),
            ('GET', mr + r'/notes', self.get_notes),
            ('POST', mr + r'/notes', self.post_note),
            ('GET', mr + r'/resource_label_events', self.get_label_events),
            ('PUT', mr + r'/merge', self.put_merge),
            ('PUT', mr + r'/rebase', self.put_rebase),
        ]

    def handle(self, request: Request):
        """(status, body, headers) for one API request."""
        for method, pattern, handler in self.routes:
            m = pattern.match(request.path)
            if m and method == request.method:
                args = [urllib.parse.unquote(g) for g in m.groups()]
                with self.store.lock:
                    return handler(request, *args)
        raise ApiError(404, '404 Not Found')

    # -- access ---------------------------------------------------------------------
    def _admin(self, request: Request) -> None:
        if not (request.user or {}).get('is_admin'):
            raise ApiError(403, '403 Forbidden')

    def _project(self, request: Request, key: str, level: int = GUEST) -> Project:
        project = self.store.find_project(key)
        have = self.store.access(project, request.user)
        if have == 0 and project.visibility != 'public':
            raise ApiError(404, '404 Project Not Found')
        if have < level:
            raise ApiError(403, '403 Forbidden')
        return project

    # -- users, groups, projects -----------------------------------------------------
    def get_user(self, request):
        if request.user is None:
            raise ApiError(401, '401 Unauthorized')
        return 200, hooks.user_json(request.user)

    def post_user(self, request):
        self._admin(request)
        user = self.store.add_user(request.arg('username'), request.arg('name') or '',
                                   request.arg('email') or '',
                                   admin=bool(request.arg('admin')))
        return 201, hooks.user_json(user)

    def post_token(self, request, uid):
        self._admin(request)
        user = self.store.find_user(uid)
        token = self.store.add_token(user['id'])
        return 201, {'id': self.store.new_id(), 'name': request.arg('name') or 'token',
                     'user_id': user['id'], 'active': True, 'revoked': False,
                     'scopes': request.arg('scopes') or ['api'], 'token': token}

    def post_group(self, request):
        self._admin(request)
        group = self.store.add_group(request.arg('path'), request.arg('name') or '')
        return 201, group

    def post_project(self, request):
        if request.user is None:
            raise ApiError(401, '401 Unauthorized')
        namespace = request.user['username']
        if request.arg('namespace_id'):
            group = self.store.groups.get(int(request.arg('namespace_id')))
            if group is None:
                raise ApiError(404, '404 Namespace Not Found')
            namespace = group['full_path']
        path = request.arg('path') or request.arg('name')
        project = self.store.add_project(namespace, path, request.user['id'])
        self._settings(project, request)
        return 201, self._project_json(project)

    def _settings(self, project: Project, request) -> None:
        for key, attr in (('merge_method', 'merge_method'),
                          ('squash_option', 'squash_option'),
                          ('visibility', 'visibility'),
                          ('approvals_before_merge', 'approvals_required')):
            value = request.arg(key)
            if value is not None:
                setattr(project, attr, int(value) if attr == 'approvals_required' else value)

    def _project_json(self, project: Project) -> dict:
        data = hooks.project_json(self.store, project)
        data.update(merge_method=project.merge_method, squash_option=project.squash_option,
                    visibility=project.visibility, http_url_to_repo=data['git_http_url'],
                    ssh_url_to_repo=data['git_ssh_url'],
                    approvals_before_merge=project.approvals_required,
                    name_with_namespace=project.path_with_namespace.replace('/', ' / '))
        return data

    def get_project(self, request, key):
        return 200, self._project_json(self._project(request, key))

    def put_project(self, request, key):
        project = self._project(request, key, MAINTAINER)
        self._settings(project, request)
        return 200, self._project_json(project)

    def post_member(self, request, key):
        project = self._project(request, key, MAINTAINER)
        user = self.store.find_user(request.arg('user_id'))
        project.members[user['id']] = int(request.arg('access_level'))
        return 201, dict(hooks.user_json(user), access_level=project.members[user['id']])

    def post_hook(self, request, key):
        project = self._project(request, key, MAINTAINER)
        hook = {'id': self.store.new_id(), 'url': request.arg('url'),
                'token': request.arg('token'), 'uuid': f'hook-{len(project.hooks) + 1}',
                'project_id': project.id}
        for flag in ('push_events', 'tag_push_events', 'merge_requests_events',
                     'note_events'):
            value = request.arg(flag)
            hook[flag] = (flag == 'push_events') if value is None else \
                str(value).lower() in ('true', '1')
        project.hooks.append(hook)
        return 201, {k: v for k, v in hook.items() if k != 'token'}

    def get_hooks(self, request, key):
        project = self._project(request, key, MAINTAINER)
        return 200, [{k: v for k, v in h.items() if k != 'token'} for h in project.hooks]

    def get_events(self, request, key):
        project = self._project(request, key, REPORTER)
        events = project.events
        action = request.arg('action')
        if action == 'pushed':
            events = [e for e in events if 'push_data' in e]
        elif action:
            events = [e for e in events if e['action_name'] == action]
        after = parse_time(request.arg('after'))
        if after is not None:
            events = [e for e in events if parse_time(e['created_at']) >= after + 86400]
        if request.arg('sort', 'desc') == 'desc':
            events = list(reversed(events))
        return 200, events

    def get_protected(self, request, key):
        project = self._project(request, key, MAINTAINER)
        return 200, [{'id': i, 'name': name,
                      'push_access_levels': [{'access_level': levels['push']}],
                      'merge_access_levels': [{'access_level': levels['merge']}]}
                     for i, (name, levels) in enumerate(project.protected.items())]

    def post_protected(self, request, key):
        project = self._project(request, key, MAINTAINER)
        name = request.arg('name')
        if name in project.protected:
            raise ApiError(409, f"Protected branch '{name}' already exists")
        project.protected[name] = {
            'push': int(request.arg('push_access_level', MAINTAINER)),
            'merge': int(request.arg('merge_access_level', MAINTAINER))}
        return 201, {'name': name}

    def delete_protected(self, request, key, name):
        project = self._project(request, key, MAINTAINER)
        if project.protected.pop(name, None) is None:
            raise ApiError(404, '404 Not found')
        return 204, None

    def get_branches(self, request, key):
        project = self._project(request, key, GUEST)
        out = []
        for ref, sha in sorted(self.store.refs(project).items()):
            if ref.startswith('refs/heads/'):
                name = ref[len('refs/heads/'):]
                out.append({'name': name, 'commit': {'id': sha}, 'merged': False,
                            'protected': name in project.protected,
                            'default': name == project.default_branch})
        return 200, out

    def post_tag(self, request, key):
        project = self._project(request, key, DEVELOPER)
        name, ref = request.arg('tag_name'), request.arg('ref')
        sha = self.store.git(project, 'rev-parse', '--verify', ref, check=False)
        if not sha:
            raise ApiError(400, 'Target ref is invalid')
        self.store.git(project, 'update-ref', f'refs/tags/{name}', sha, ZERO_SHA)
        self.mrs.pushed(project, request.user, f'refs/tags/{name}', ZERO_SHA, sha)
        return 201, {'name': name, 'target': sha, 'commit': {'id': sha}}

    # -- merge requests -------------------------------------------------------------
    def get_mrs(self, request, key):
        project = self._project(request, key, REPORTER)
        state = request.arg('state', 'all')
        after = parse_time(request.arg('updated_after'))
        before = parse_time(request.arg('updated_before'))
        out = []
        for mr in project.mrs.values():
            if state != 'all' and mr['state'] != state:
                continue
            if request.arg('target_branch') and mr['target_branch'] != \
                    request.arg('target_branch'):
                continue
            if after is not None and mr['updated_at'] < after:
                continue
            if before is not None and mr['updated_at'] > before:
                continue
            out.append(mr)
        out.sort(key=lambda m: m['updated_at' if request.arg('order_by') == 'updated_at'
                                 else 'created_at'],
                 reverse=request.arg('sort', 'desc') == 'desc')
        return 200, [self.mrs.to_json(project, mr) for mr in out]

    def post_mr(self, request, key):
        project = self._project(request, key, DEVELOPER)
        mr = self.mrs.create(project, request.user, request.body or {
            k: v[0] for k, v in request.query.items()})
        return 201, self.mrs.to_json(project, mr)

    def get_mr(self, request, key, iid):
        project = self._project(request, key, REPORTER)
        return 200, self.mrs.to_json(project, self.mrs.get(project, iid),
                                     rebase_in_progress=bool(
                                         request.arg('include_rebase_in_progress')))

    def put_mr(self, request, key, iid):
        project = self._project(request, key, DEVELOPER)
        mr = self.mrs.update(project, self.mrs.get(project, iid), request.user, request.body)
        return 200, self.mrs.to_json(project, mr)

    def get_diffs(self, request, key, iid):
        project = self._project(request, key, REPORTER)
        mr = self.mrs.get(project, iid)
        diffs = self.store.changed_files(project, mr['base_sha'] or mr['sha'], mr['sha'])
        if request.path.endswith('/changes'):
            return 200, dict(self.mrs.to_json(project, mr), changes=diffs)
        return 200, diffs

    def get_versions(self, request, key, iid):
        project = self._project(request, key, REPORTER)
        return 200, list(self.mrs.get(project, iid)['versions'])

    def get_approvals(self, request, key, iid):
        project = self._project(request, key, REPORTER)
        return 200, self.mrs.approvals_json(project, self.mrs.get(project, iid))

    def _approve(self, request, key, iid, approve):
        project = self._project(request, key, DEVELOPER)
        mr = self.mrs.get(project, iid)
        self.mrs.approve(project, mr, request.user, request.arg('sha'), approve)
        return (201 if approve else 201), self.mrs.approvals_json(project, mr)

    def post_approve(self, request, key, iid):
        return self._approve(request, key, iid, True)

    def post_unapprove(self, request, key, iid):
        return self._approve(request, key, iid, False)

    def get_notes(self, request, key, iid):
        project = self._project(request, key, REPORTER)
        notes = list(self.mrs.get(project, iid)['notes'])
        if request.arg('sort', 'desc') == 'desc':
            notes.reverse()
        return 200, notes

    def post_note(self, request, key, iid):
        project = self._project(request, key, GUEST)
        note = self.mrs.note(project, self.mrs.get(project, iid), request.user,
                             request.arg('body'))
        return 201, note

    def get_label_events(self, request, key, iid):
        project = self._project(request, key, REPORTER)
        return 200, list(self.mrs.get(project, iid)['label_events'])

    def put_merge(self, request, key, iid):
        project = self._project(request, key, GUEST)
        mr = self.mrs.merge(project, self.mrs.get(project, iid), request.user,
                            request.body or {k: v[0] for k, v in request.query.items()})
        return 200, self.mrs.to_json(project, mr)

    def put_rebase(self, request, key, iid):
        project = self._project(request, key, DEVELOPER)
        self.mrs.rebase(project, self.mrs.get(project, iid), request.user)
        return 202, {'rebase_in_progress': True}


def page(items: list, query: dict) -> tuple[list, dict]:
    """One page of a list and GitLab's paging headers."""
    per_page = max(1, min(100, int((query.get('per_page') or [20])[0])))
    number = max(1, int((query.get('page') or [1])[0]))
    total = len(items)
    pages = max(1, -(-total // per_page))
    headers = {'X-Page': str(number), 'X-Per-Page': str(per_page), 'X-Total': str(total),
               'X-Total-Pages': str(pages),
               'X-Next-Page': str(number + 1) if number < pages else '',
               'X-Prev-Page': str(number - 1) if number > 1 else ''}
    return items[(number - 1) * per_page: number * per_page], headers


__all__ = ['Api', 'Request', 'page', 'iso']
