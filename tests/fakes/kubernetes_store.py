"""The object store and authorization of the Kubernetes API stand-in
(tests/fakes/kubernetes_api.py): JSON objects by kind, namespace and
name, resource versions, watch events, service-account tokens and the
RBAC rules that decide what a token may do."""

from __future__ import annotations

import base64
import re
import secrets
import threading
import time
import uuid

NAME_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')
SA_TOKEN_TYPE = 'kubernetes.io/service-account-token'
FAKE_CA = base64.b64encode(b'-----BEGIN CERTIFICATE-----\nstand-in\n'
                           b'-----END CERTIFICATE-----\n').decode()

# (api group, plural) -> (kind, namespaced)
RESOURCES = {
    ('', 'namespaces'): ('Namespace', False),
    ('', 'pods'): ('Pod', True),
    ('', 'secrets'): ('Secret', True),
    ('', 'serviceaccounts'): ('ServiceAccount', True),
    ('', 'configmaps'): ('ConfigMap', True),
    ('rbac.authorization.k8s.io', 'roles'): ('Role', True),
    ('rbac.authorization.k8s.io', 'rolebindings'): ('RoleBinding', True),
    ('project.openshift.io', 'projects'): ('Project', False),
    ('project.openshift.io', 'projectrequests'): ('ProjectRequest', False),
}


class ApiError(Exception):
    """An error answered as a Kubernetes ``Status``."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def status(self) -> dict:
        return {'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
                'message': self.message, 'reason': self.reason, 'code': self.code}


def now() -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())


def matches_selector(obj: dict, selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj.get('metadata', {}).get('labels') or {}
    for term in selector.split(','):
        term = term.strip()
        if '!=' in term:
            key, value = term.split('!=', 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif '=' in term:
            key, value = term.replace('==', '=').split('=', 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term and term not in labels:
            return False
    return True


class Store:
    """Every object; one lock; a condition for watches."""

    def __init__(self, admin_token: str):
        self.admin_token = admin_token
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.objects: dict[tuple[str, str, str], dict] = {}   # (plural, ns, name)
        self.events: list[tuple[int, str, str, dict]] = []    # (rv, plural, type, obj)
        self.version = 1
        #: token -> (namespace, service account)
        self.tokens: dict[str, tuple[str, str]] = {}

    # -- objects --------------------------------------------------------------------

    def _bump(self, plural: str, kind: str, obj: dict) -> None:
        self.version += 1
        obj['metadata']['resourceVersion'] = str(self.version)
        self.events.append((self.version, plural, kind, _copy(obj)))
        del self.events[:-2000]
        self.changed.notify_all()

    def create(self, plural: str, ns: str, obj: dict) -> dict:
        meta = obj.setdefault('metadata', {})
        name = meta.get('name') or ''
        if not NAME_RE.match(name) or len(name) > 63:
            raise ApiError(422, 'Invalid', f'{plural[:-1]} "{name}" is invalid: metadata.name: '
                           'Invalid value: a lowercase RFC 1123 label must consist of lower '
                           "case alphanumeric characters or '-'")
        with self.lock:
            if ns and ('namespaces', '', ns) not in self.objects:
                raise ApiError(404, 'NotFound', f'namespaces "{ns}" not found')
            if ns and self.objects[('namespaces', '', ns)]['status'].get('phase') == \
                    'Terminating':
                raise ApiError(403, 'Forbidden', f'unable to create new content in namespace '
                               f'{ns} because it is being terminated')
            key = (plural, ns, name)
            if key in self.objects:
                raise ApiError(409, 'AlreadyExists', f'{plural} "{name}" already exists')
            meta.update({'uid': str(uuid.uuid4()), 'creationTimestamp': now()})
            if ns:
                meta['namespace'] = ns
            obj.setdefault('status', {})
            self.objects[key] = obj
            self._bump(plural, 'ADDED', obj)
            return _copy(obj)

    def get(self, plural: str, ns: str, name: str) -> dict:
        with self.lock:
            obj = self.objects.get((plural, ns, name))
            if obj is None:
                raise ApiError(404, 'NotFound', f'{plural} "{name}" not found')
            return _copy(obj)

    def update(self, plural: str, ns: str, name: str, fn) -> dict:
        with self.lock:
            obj = self.objects.get((plural, ns, name))
            if obj is None:
                raise ApiError(404, 'NotFound', f'{plural} "{name}" not found')
            fn(obj)
            self._bump(plural, 'MODIFIED', obj)
            return _copy(obj)

    def remove(self, plural: str, ns: str, name: str) -> dict | None:
        with self.lock:
            obj = self.objects.pop((plural, ns, name), None)
            if obj is not None:
                self._bump(plural, 'DELETED', obj)
                if plural == 'secrets':
                    token = base64.b64decode((obj.get('data') or {}).get('token', '') or b'')
                    self.tokens.pop(token.decode(errors='replace'), None)
            return obj

    def list(self, plural: str, ns: str | None, selector: str | None = None) -> list[dict]:
        with self.lock:
            return [_copy(o) for (p, n, _), o in sorted(self.objects.items())
                    if p == plural and (ns is None or n == ns) and matches_selector(o, selector)]

    def namespaced(self, ns: str) -> list[tuple[str, str, str]]:
        with self.lock:
            return [k for k in self.objects if k[1] == ns]

    # -- tokens ----------------------------------------------------------------------

    def fill_token(self, ns: str, name: str) -> None:
        """The token controller: a service-account token secret gets its
        token and the cluster's CA."""
        token = secrets.token_urlsafe(32)

        def fill(obj):
            account = (obj['metadata'].get('annotations') or {}).get(
                'kubernetes.io/service-account.name')
            obj['data'] = {'token': base64.b64encode(token.encode()).decode(),
                           'ca.crt': FAKE_CA, 'namespace': base64.b64encode(ns.encode()).decode()}
            self.tokens[token] = (ns, account)
        try:
            self.update('secrets', ns, name, fill)
        except ApiError:
            pass

    # -- authorization ----------------------------------------------------------------

    def authorize(self, token: str | None, group: str, plural: str, ns: str, name: str,
                  verb: str) -> None:
        """Raise 401/403 unless ``token`` may do ``verb`` on the object."""
        if token == self.admin_token:
            return
        with self.lock:
            who = self.tokens.get(token or '')
        if who is None:
            raise ApiError(401, 'Unauthorized', 'Unauthorized')
        sa_ns, account = who
        user = f'system:serviceaccount:{sa_ns}:{account}'
        denied = ApiError(403, 'Forbidden', f'{plural} "{name}" is forbidden: User "{user}" '
                          f'cannot {verb} resource "{plural}" in API group "{group}" '
                          f'in the namespace "{ns}"')
        if not ns or ns != sa_ns:
            raise denied
        for binding in self.list('rolebindings', ns):
            if not any(s.get('kind') == 'ServiceAccount' and s.get('name') == account and
                       s.get('namespace', ns) == sa_ns for s in binding.get('subjects') or []):
                continue
            role_name = (binding.get('roleRef') or {}).get('name')
            try:
                role = self.get('roles', ns, role_name)
            except ApiError:
                continue
            for rule in role.get('rules') or []:
                if _rule_allows(rule, group, plural, name, verb):
                    return
        raise denied


def _rule_allows(rule: dict, group: str, plural: str, name: str, verb: str) -> bool:
    def has(key, value):
        values = rule.get(key) or []
        return '*' in values or value in values
    if not (has('apiGroups', group) and has('resources', plural) and has('verbs', verb)):
        return False
    names = rule.get('resourceNames')
    return not names or name in names


def _copy(obj):
    import copy
    return copy.deepcopy(obj)
