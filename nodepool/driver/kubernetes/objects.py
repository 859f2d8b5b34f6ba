"""The Kubernetes objects the driver creates, as API JSON."""

from __future__ import annotations

import copy

SERVICE_ACCOUNT = 'zuul-worker'

# A namespace node's account may do anything in its namespace, and
# nothing elsewhere (a Role, not a ClusterRole).
NAMESPACE_RULES = [{'apiGroups': ['*'], 'resources': ['*'], 'verbs': ['*']}]


def role_rules(pod: str | None) -> list[dict]:
    """The rules of a node's role: its namespace, or (openshiftpods, in a
    project other nodes share) its own pod alone."""
    if pod is None:
        return copy.deepcopy(NAMESPACE_RULES)
    return [{'apiGroups': [''], 'resources': ['pods', 'pods/exec', 'pods/log',
                                              'pods/portforward'],
             'resourceNames': [pod], 'verbs': ['get', 'create']}]


def _resources(settings: dict) -> dict:
    requests, limits = {}, {}
    if settings.get('cpu'):
        requests['cpu'] = str(settings['cpu'])
    if settings.get('memory'):
        requests['memory'] = f'{settings["memory"]}Mi'
    if settings.get('storage'):
        requests['ephemeral-storage'] = f'{settings["storage"]}M'
    if settings.get('cpu-limit'):
        limits['cpu'] = str(settings['cpu-limit'])
    if settings.get('memory-limit'):
        limits['memory'] = f'{settings["memory-limit"]}Mi'
    if settings.get('storage-limit'):
        limits['ephemeral-storage'] = f'{settings["storage-limit"]}M'
    if settings.get('gpu'):
        key = settings.get('gpu-resource') or 'nvidia.com/gpu'
        limits[key] = str(settings['gpu'])
    for key, value in (settings.get('extra-resources') or {}).items():
        requests[key] = limits[key] = str(value)
    out = {}
    if requests:
        out['requests'] = requests
    if limits:
        out['limits'] = limits
    return out


def _dynamic_labels(templates: dict, request: dict | None) -> dict:
    from types import SimpleNamespace
    fields = SimpleNamespace(**(request or {}))
    out = {}
    for key, template in (templates or {}).items():
        try:
            out[str(key)] = str(template.format(request=fields))[:63]
        except (AttributeError, KeyError, IndexError, ValueError):
            continue
    return out


def pod_body(name: str, settings: dict, labels: dict, request: dict | None = None) -> dict:
    """The pod of a ``pod`` label: the label's ``spec`` if it gives one,
    else one container ``name`` running ``image`` asleep for ever (the
    executor's tasks run in it through exec)."""
    all_labels = {**(settings.get('labels') or {}),
                  **_dynamic_labels(settings.get('dynamic-labels'), request), **labels}
    meta = {'name': name, 'labels': all_labels}
    if settings.get('annotations'):
        meta['annotations'] = dict(settings['annotations'])
    if settings.get('spec'):
        return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': meta,
                'spec': copy.deepcopy(settings['spec'])}
    container = {'name': name, 'image': settings['image'],
                 'imagePullPolicy': settings.get('image-pull', 'IfNotPresent'),
                 'command': ['/bin/sh', '-c'],
                 'args': ['while true; do sleep 30; done; trap : TERM INT'],
                 'workingDir': '/tmp'}
    resources = _resources(settings)
    if resources:
        container['resources'] = resources
    if settings.get('env'):
        container['env'] = copy.deepcopy(settings['env'])
    if settings.get('privileged') is not None:
        container['securityContext'] = {'privileged': bool(settings['privileged'])}
    if settings.get('volume-mounts'):
        container['volumeMounts'] = copy.deepcopy(settings['volume-mounts'])
    spec: dict = {'containers': [container], 'restartPolicy': 'Never'}
    if settings.get('node-selector'):
        spec['nodeSelector'] = dict(settings['node-selector'])
    if settings.get('scheduler-name'):
        spec['schedulerName'] = settings['scheduler-name']
    if settings.get('volumes'):
        spec['volumes'] = copy.deepcopy(settings['volumes'])
    if settings.get('image-pull-secrets'):
        spec['imagePullSecrets'] = copy.deepcopy(settings['image-pull-secrets'])
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': meta, 'spec': spec}
