"""A Kubernetes (or OpenShift) cluster as a provider, through the official
``kubernetes`` client.

The launcher's credentials come from its kube/config (the provider's
``context``; ``KUBECONFIG`` names another file) or, inside a cluster,
from the pod's service account.

A node is one of:

- ``namespace`` (``project`` on OpenShift): a namespace made for the
  node, with a service account ``zuul-worker``, its token and a role
  binding that gives it the namespace and nothing else.  The job gets a
  kubeconfig for it.
- ``pod``: the same namespace with one pod running the label's image; the
  executor runs the job's tasks in it through the ``kubectl``
  connection.  On ``openshiftpods`` the pod goes into the pool's existing
  project and its service account may reach that pod alone.

Every object carries the labels ``nodepool_node_id``,
``nodepool_provider_name``, ``nodepool_pool_name`` and
``nodepool_node_label``; ``list`` finds (leaked) nodes by them.

What a node's user needs is reported on the instance: ``resource``
(namespace, pod, API server, CA: public) and ``secret`` (the token:
kept out of the node record, see nodepool.zk.api ``store_node_secret``).
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from nodepool.driver import (
    Instance,
    InstanceSpec,
    LaunchError,
    ProviderAdapter,
    ProviderError,
    Quota,
    QuotaError,
    resource_name,
)
from nodepool.driver.kubernetes.objects import (
    SERVICE_ACCOUNT,
    pod_body,
    role_rules,
)
from nodepool.driver.settings import PoolConfig

log = logging.getLogger('nodepool.driver.kubernetes')

PROJECT_GROUP = ('project.openshift.io', 'v1')
TOKEN_SECRET = 'zuul-worker-token'


def _reason(e: ApiException) -> str:
    """The API server's message of a refusal (its Status object)."""
    import json
    try:
        body = json.loads(e.body or '{}')
        return f'{e.status} {body.get("reason") or e.reason}: {body.get("message") or ""}'.strip()
    except (ValueError, TypeError):
        return f'{e.status} {e.reason}'


def _error(what: str, e: ApiException) -> ProviderError:
    reason = _reason(e)
    if e.status == 403 and 'exceeded quota' in reason:
        return QuotaError(f'{what}: {reason}')
    if e.status in (400, 403, 404, 409, 422):
        return LaunchError(f'{what}: {reason}')
    return ProviderError(f'{what}: {reason}')


class KubernetesAdapter(ProviderAdapter):
    check_ssh = False
    # Released Nodepool's one timeout for these drivers: ``boot-timeout``
    # from create until the pod runs (poll says ready only then).
    times_own_launch = True

    #: Seconds ``delete`` waits for a namespace to go.
    delete_timeout = 300.0

    def __init__(self, provider):
        super().__init__(provider)
        self.settings = provider.settings
        self.kind = self.settings.get('kind', 'kubernetes')
        self._lock = threading.Lock()
        self._api: k8s.ApiClient | None = None
        #: external id -> (pod name or None, namespace, label settings)
        self._launches: dict[str, tuple] = {}

    # -- connection -----------------------------------------------------------------

    @property
    def api(self) -> k8s.ApiClient:
        with self._lock:
            if self._api is None:
                self._api = self._connect()
            return self._api

    def _connect(self) -> k8s.ApiClient:
        conn = self.settings.get('connection') or {}
        context = conn.get('context') or self.settings.get('context')
        config_file = conn.get('kubeconfig-file') or os.environ.get('KUBECONFIG') or None
        try:
            # KUBECONFIG as it is now (the client reads it once, at import).
            return k8s_config.new_client_from_config(
                config_file=config_file, context=context,
                persist_config=False)
        except (ConfigException, OSError, TypeError) as file_error:
            if context:
                raise ProviderError(f'{self.kind} provider {self.provider.name}: context '
                                    f'{context!r}: {file_error}') from None
            cfg = k8s.Configuration()
            try:
                k8s_config.load_incluster_config(client_configuration=cfg)
            except ConfigException:
                raise ProviderError(f'{self.kind} provider {self.provider.name}: no kube/config '
                                    f'({file_error}) and not inside a cluster') from None
            return k8s.ApiClient(cfg)

    def start(self) -> None:
        self.api

    def stop(self) -> None:
        with self._lock:
            api, self._api = self._api, None
        if api is not None:
            api.close()

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api)

    @property
    def rbac(self) -> k8s.RbacAuthorizationV1Api:
        return k8s.RbacAuthorizationV1Api(self.api)

    @property
    def custom(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ApiException as e:
            raise _error(what, e) from None
        except OSError as e:   # urllib3's connection errors are OSErrors
            raise ProviderError(f'{what}: {e}') from None

    # -- launching -------------------------------------------------------------------

    def _labels(self, spec: InstanceSpec) -> dict:
        return {'nodepool_node_id': spec.node_id, 'nodepool_provider_name':
                resource_name(spec.provider), 'nodepool_pool_name': resource_name(spec.pool),
                'nodepool_node_label': resource_name(spec.label)}

    def create(self, spec: InstanceSpec) -> str:
        settings = self.provider.pools[spec.pool].labels[spec.label].settings
        ltype = settings.get('type', 'pod')
        labels = self._labels(spec)
        if self.kind == 'openshiftpods':
            namespace = spec.pool
            pod = resource_name(spec.label, spec.node_id)
            external_id = f'{namespace}/{pod}'
        else:
            namespace = resource_name(spec.label, spec.node_id)
            pod = resource_name(spec.label) if ltype == 'pod' else None
            external_id = namespace
        try:
            if self.kind != 'openshiftpods':
                self._create_namespace(namespace, labels)
            self._create_account(namespace, pod, labels)
            if pod is not None:
                self._call(f'creating pod {namespace}/{pod}',
                           self.core.create_namespaced_pod, namespace,
                           pod_body(pod, settings, labels, spec.request))
        except ProviderError:
            self._undo(external_id)
            raise
        with self._lock:
            self._launches[external_id] = (pod, namespace, ltype)
        log.info('Provider %s: %s %s created for node %s', self.provider.name,
                 'pod' if pod else ltype, external_id, spec.node_id)
        return external_id

    def _undo(self, external_id: str) -> None:
        try:
            self._delete(external_id, wait=False)
        except ProviderError as e:
            log.warning('Provider %s: removing the half-made %s failed: %s (leak cleanup '
                        'retries)', self.provider.name, external_id, e)

    def _create_namespace(self, name: str, labels: dict) -> None:
        body = {'apiVersion': 'v1', 'kind': 'Namespace',
                'metadata': {'name': name, 'labels': labels}}
        if self.kind == 'openshift':
            # A project request names the project; its labels come after.
            self._call(f'requesting project {name}', self.custom.create_cluster_custom_object,
                       *PROJECT_GROUP, 'projectrequests',
                       {'apiVersion': 'project.openshift.io/v1', 'kind': 'ProjectRequest',
                        'metadata': {'name': name}})
            self._call(f'labelling project {name}', self.core.patch_namespace, name,
                       {'metadata': {'labels': labels}})
            return
        self._call(f'creating namespace {name}', self.core.create_namespace, body)

    def _create_account(self, namespace: str, pod: str | None, labels: dict) -> None:
        """The node's service account, its token and its role."""
        suffix = f'-{pod}' if self.kind == 'openshiftpods' else ''
        account = f'{SERVICE_ACCOUNT}{suffix}'
        meta = {'labels': labels}
        self._call(f'creating service account {namespace}/{account}',
                   self.core.create_namespaced_service_account, namespace,
                   {'metadata': {'name': account, **meta}})
        self._call(f'creating the token of {namespace}/{account}',
                   self.core.create_namespaced_secret, namespace,
                   {'metadata': {'name': f'{TOKEN_SECRET}{suffix}', **meta,
                                 'annotations': {'kubernetes.io/service-account.name':
                                                 account}},
                    'type': 'kubernetes.io/service-account-token'})
        rules = role_rules(pod if self.kind == 'openshiftpods' else None)
        self._call(f'creating role {namespace}/{account}', self.rbac.create_namespaced_role,
                   namespace, {'metadata': {'name': account, **meta}, 'rules': rules})
        self._call(f'binding role {namespace}/{account}',
                   self.rbac.create_namespaced_role_binding, namespace,
                   {'metadata': {'name': account, **meta},
                    'roleRef': {'apiGroup': 'rbac.authorization.k8s.io', 'kind': 'Role',
                                'name': account},
                    'subjects': [{'kind': 'ServiceAccount', 'name': account,
                                  'namespace': namespace}]})

    def poll(self, external_id: str) -> Instance | None:
        with self._lock:
            launch = self._launches.get(external_id)
        if launch is None:
            raise LaunchError(f'{external_id} was not created by this launcher')
        pod, namespace, ltype = launch
        suffix = f'-{pod}' if self.kind == 'openshiftpods' else ''
        try:
            secret = self.core.read_namespaced_secret(f'{TOKEN_SECRET}{suffix}', namespace)
        except ApiException as e:
            if e.status == 404:
                raise LaunchError(f'{external_id}: its token secret vanished') from None
            log.warning('Provider %s: reading the token of %s: %s', self.provider.name,
                        external_id, _reason(e))
            return None
        data = secret.data or {}
        if not data.get('token'):
            return None       # the token controller has not filled it in yet
        inst = Instance(external_id=external_id, ready=True,
                        node_id=None, username=SERVICE_ACCOUNT)
        if pod is not None:
            if not self._pod_running(namespace, pod, external_id):
                return None
            inst.interface_ip = pod
            inst.hostname = pod
            inst.connection_type = 'kubectl'
        else:
            inst.connection_type = 'project' if self.kind == 'openshift' else 'namespace'
        cfg = self.api.configuration
        inst.resource = {'kind': ltype, 'namespace': namespace, 'pod': pod,
                         'host': cfg.host, 'skiptls': not cfg.verify_ssl,
                         'ca_crt': data.get('ca.crt'), 'user': SERVICE_ACCOUNT + suffix}
        inst.secret = {'token': base64.b64decode(data['token']).decode()}
        inst.region = self.settings.get('context')
        with self._lock:
            self._launches.pop(external_id, None)
        return inst

    def _pod_running(self, namespace: str, pod: str, external_id: str) -> bool:
        try:
            found = self.core.read_namespaced_pod(pod, namespace)
        except ApiException as e:
            if e.status == 404:
                raise LaunchError(f'pod {external_id} vanished') from None
            log.warning('Provider %s: reading pod %s: %s', self.provider.name, external_id,
                        _reason(e))
            return False
        status = found.status
        phase = getattr(status, 'phase', None)
        if phase == 'Running':
            return True
        if phase in ('Failed', 'Succeeded'):
            why = getattr(status, 'message', None) or getattr(status, 'reason', '')
            raise LaunchError(f'pod {external_id} is {phase}: {why}')
        for cs in getattr(status, 'container_statuses', None) or []:
            waiting = getattr(getattr(cs, 'state', None), 'waiting', None)
            if waiting is not None and waiting.reason in ('ErrImagePull', 'ImagePullBackOff',
                                                          'InvalidImageName'):
                raise LaunchError(f'pod {external_id}: {waiting.reason}: {waiting.message}')
        return False

    # -- deleting and listing ---------------------------------------------------------

    def delete(self, external_id: str) -> None:
        with self._lock:
            self._launches.pop(external_id, None)
        self._delete(external_id, wait=True)

    def _delete(self, external_id: str, wait: bool) -> None:
        if self.kind == 'openshiftpods':
            namespace, _, pod = external_id.partition('/')
            self._delete_pod_objects(namespace, pod)
            return
        if self.kind == 'openshift':
            fn = lambda: self.custom.delete_cluster_custom_object(  # noqa: E731
                *PROJECT_GROUP, 'projects', external_id)
        else:
            fn = lambda: self.core.delete_namespace(external_id)  # noqa: E731
        if not self._gone(f'deleting {external_id}', fn) and wait:
            self._wait_gone(external_id)

    def _gone(self, what: str, fn) -> bool:
        """Call a delete; True if the object was not there."""
        try:
            fn()
        except ApiException as e:
            if e.status == 404:
                return True
            raise ProviderError(f'{what}: {_reason(e)}') from None
        except OSError as e:
            raise ProviderError(f'{what}: {e}') from None
        return False

    def _wait_gone(self, namespace: str) -> None:
        deadline = time.monotonic() + self.delete_timeout
        delay = 0.02
        while True:
            try:
                self.core.read_namespace(namespace)
            except ApiException as e:
                if e.status == 404:
                    return
                log.warning('Provider %s: checking deleted namespace %s: %s',
                            self.provider.name, namespace, _reason(e))
            if time.monotonic() + delay > deadline:
                raise ProviderError(f'namespace {namespace} still exists '
                                    f'{self.delete_timeout}s after deleting it')
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _delete_pod_objects(self, namespace: str, pod: str) -> None:
        account = f'{SERVICE_ACCOUNT}-{pod}'
        core, rbac = self.core, self.rbac
        for what, fn in (
                (f'deleting pod {namespace}/{pod}',
                 lambda: core.delete_namespaced_pod(pod, namespace)),
                ('deleting its role binding',
                 lambda: rbac.delete_namespaced_role_binding(account, namespace)),
                ('deleting its role', lambda: rbac.delete_namespaced_role(account, namespace)),
                ('deleting its token',
                 lambda: core.delete_namespaced_secret(f'{TOKEN_SECRET}-{pod}', namespace)),
                ('deleting its service account',
                 lambda: core.delete_namespaced_service_account(account, namespace))):
            self._gone(what, fn)

    def list(self) -> list[Instance]:
        selector = f'nodepool_provider_name={resource_name(self.provider.name)}'
        if self.kind == 'openshiftpods':
            out = []
            for pool in self.provider.pools.values():
                pods = self._call('listing pods', self.core.list_namespaced_pod, pool.name,
                                  label_selector=selector)
                out += [Instance(external_id=f'{pool.name}/{p.metadata.name}',
                                 node_id=(p.metadata.labels or {}).get('nodepool_node_id'))
                        for p in pods.items]
            return out
        if self.kind == 'openshift':
            found = self._call('listing projects', self.custom.list_cluster_custom_object,
                               *PROJECT_GROUP, 'projects', label_selector=selector)
            return [Instance(external_id=p['metadata']['name'],
                             node_id=(p['metadata'].get('labels') or {}).get('nodepool_node_id'))
                    for p in found.get('items', [])]
        found = self._call('listing namespaces', self.core.list_namespace,
                           label_selector=selector)
        return [Instance(external_id=ns.metadata.name,
                         node_id=(ns.metadata.labels or {}).get('nodepool_node_id'))
                for ns in found.items]

    # -- quota -------------------------------------------------------------------------

    def quota(self) -> Quota:
        s = self.settings
        return Quota(instances=s.get('max-pods', s.get('max-projects')),
                     cores=s.get('max-cores'), ram=s.get('max-ram'))

    def label_quota(self, pool: PoolConfig, label: str) -> Quota:
        settings = pool.labels[label].settings
        if settings.get('type', 'pod') != 'pod':
            return Quota(instances=1)
        return Quota(instances=1, cores=settings.get('cpu') or 0,
                     ram=settings.get('memory') or 0)
