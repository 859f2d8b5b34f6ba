"""The kubernetes, openshift and openshiftpods drivers' configuration:
released Nodepool's syntax.

    - name: k8s
      driver: kubernetes
      context: admin-cluster.local      # a context of the launcher's kube/config
      launch-retries: 3
      max-pods: 20                      # provider-wide limits (optional)
      max-cores: 40
      max-ram: 81920
      pools:
        - name: main
          max-pods: 10
          node-attributes: {team: a}
          default-label-cpu: 1           # requests of labels that name none
          default-label-memory: 512      # MiB
          labels:
            - name: k8s-namespace
              type: namespace
            - name: pod-fedora
              type: pod
              image: docker.io/fedora:40
              image-pull: IfNotPresent
              cpu: 2
              memory: 1024
              env: [{name: FOO, value: bar}]
              node-selector: {storageType: ssd}
              labels: {team: a}
              annotations: {owner: zuul}

``openshift`` has projects instead of namespaces (``type: project``,
``max-projects``) and ``openshiftpods`` runs pods in existing projects:
each of its pools is named after its project.

Without ``context`` the launcher uses its kube/config's current
context, or, inside a cluster, the pod's service account.
"""

from __future__ import annotations

import re

import voluptuous as v

from nodepool.driver import Driver, unique_pools
from nodepool.driver.settings import (
    POOL_COMMON,
    POOL_LABEL_COMMON,
    PROVIDER_COMMON,
    PoolConfig,
    ProviderConfig,
    common_label,
    common_provider,
)

KINDS = ('kubernetes', 'openshift', 'openshiftpods')
DEFAULT_USERNAME = 'zuul-worker'
DEFAULT_BOOT_TIMEOUT = 600
_RESOURCE_NAME = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')

_ENV = [{v.Required('name'): str, 'value': str, 'valueFrom': dict}]

# Label keys every kind takes (pod labels).
_POD_LABEL = {
    **POOL_LABEL_COMMON,
    'image': str,
    'image-pull': v.Any('IfNotPresent', 'Always', 'Never'),
    'image-pull-secrets': [{v.Required('name'): str}],
    'cpu': int,
    'memory': int,
    'storage': int,
    'gpu': v.Any(int, float, str),
    'gpu-resource': str,
    'cpu-limit': int,
    'memory-limit': int,
    'storage-limit': int,
    'extra-resources': {str: int},
    'env': _ENV,
    'node-selector': {str: str},
    'privileged': bool,
    'scheduler-name': str,
    'volumes': [dict],
    'volume-mounts': [dict],
    'labels': {str: str},
    'dynamic-labels': {str: str},
    'annotations': {str: str},
    'spec': dict,
}

_DEFAULTS = {
    'default-label-cpu': int,
    'default-label-memory': int,
    'default-label-storage': int,
    'default-label-cpu-limit': int,
    'default-label-memory-limit': int,
    'default-label-storage-limit': int,
    'default-label-extra-resources': {str: int},
}

_LIMITS = {'max-cores': int, 'max-ram': int, 'max-resources': {str: int}}


def _schema(kind: str) -> dict:
    if kind == 'openshiftpods':
        label = _POD_LABEL
        provider_limits = {'max-pods': int}
    else:
        other = 'namespace' if kind == 'kubernetes' else 'project'
        label = {**_POD_LABEL, 'type': v.Any(other, 'pod')}
        provider_limits = {'max-pods': int} if kind == 'kubernetes' else {'max-projects': int}
    pool = {**POOL_COMMON, **_LIMITS, **_DEFAULTS, **provider_limits,
            'max-servers': int, 'labels': [label]}
    return {**PROVIDER_COMMON, 'context': str, **_LIMITS, **provider_limits,
            v.Required('pools'): [pool]}


def _check(kind: str, raw: dict) -> None:
    problems = []
    for i, pool in enumerate(raw['pools']):
        if kind == 'openshiftpods' and not _RESOURCE_NAME.match(pool['name']):
            problems.append(v.Invalid(f'pool {pool["name"]!r} must be named after an existing '
                                      'project (lower case letters, digits and -)',
                                      path=['pools', i, 'name']))
        for j, label in enumerate(pool.get('labels') or []):
            where = ['pools', i, 'labels', j]
            ltype = label.get('type', 'pod')
            if ltype == 'pod' and not label.get('image') and not label.get('spec'):
                problems.append(v.Invalid(f'label {label["name"]!r}: a pod label needs an '
                                          'image (or a spec)', path=where))
            if label.get('spec') and label.get('image'):
                problems.append(v.Invalid(f'label {label["name"]!r}: give either spec (a full '
                                          'pod spec) or image, not both',
                                          path=where + ['spec']))
            if label.get('spec') and not isinstance(label['spec'].get('containers'), list):
                problems.append(v.Invalid(f'label {label["name"]!r}: spec needs a list of '
                                          'containers', path=where + ['spec']))
            if ltype != 'pod' and label.get('image'):
                problems.append(v.Invalid(f'label {label["name"]!r}: a {ltype} label runs no '
                                          'image', path=where + ['image']))
    if problems:
        raise v.MultipleInvalid(problems)


def _limits(raw: dict) -> dict:
    out = {k: raw[k] for k in ('max-cores', 'max-ram', 'max-pods', 'max-projects',
                               'max-resources') if raw.get(k) is not None}
    return out


def _label_settings(pool_raw: dict, label_raw: dict) -> dict:
    settings = {k: val for k, val in label_raw.items()
                if k not in ('name', 'username', 'python-path', 'shell-type')}
    settings.setdefault('type', 'pod')
    for key in ('cpu', 'memory', 'storage', 'cpu-limit', 'memory-limit', 'storage-limit',
                'extra-resources'):
        default = pool_raw.get(f'default-label-{key}')
        if default is not None and key not in settings and settings['type'] == 'pod':
            settings[key] = default
    settings.setdefault('image-pull', 'IfNotPresent')
    return settings


class KubernetesDriver(Driver):
    """kubernetes; ``OpenShiftDriver`` and ``OpenShiftPodsDriver`` differ
    only in kind."""

    name = 'kubernetes'

    def provider_schema(self) -> v.Schema:
        return v.Schema(_schema(self.name))

    def load_provider(self, raw: dict) -> ProviderConfig:
        unique_pools(raw)
        _check(self.name, raw)
        provider = common_provider(raw)
        provider.boot_timeout = raw.get('boot-timeout', DEFAULT_BOOT_TIMEOUT)
        provider.settings = {'kind': self.name, 'context': raw.get('context'),
                             **_limits(raw)}
        for raw_pool in raw['pools']:
            pool = PoolConfig(name=raw_pool['name'], provider=provider.name,
                              max_servers=raw_pool.get('max-servers',
                                                       raw_pool.get('max-pods',
                                                                    raw_pool.get('max-projects'))),
                              max_cores=raw_pool.get('max-cores'),
                              max_ram=raw_pool.get('max-ram'),
                              priority=raw_pool.get('priority', provider.priority),
                              node_attributes=dict(raw_pool.get('node-attributes') or {}))
            pool.settings = _limits(raw_pool)
            for raw_label in raw_pool.get('labels') or []:
                label = common_label(raw_label, username=DEFAULT_USERNAME)
                label.settings = _label_settings(raw_pool, raw_label)
                pool.labels[label.name] = label
            provider.pools[pool.name] = pool
        return provider

    def get_adapter(self, provider: ProviderConfig):
        from nodepool.driver.kubernetes.adapter import KubernetesAdapter
        return KubernetesAdapter(provider)


class OpenShiftDriver(KubernetesDriver):
    name = 'openshift'


class OpenShiftPodsDriver(KubernetesDriver):
    name = 'openshiftpods'
