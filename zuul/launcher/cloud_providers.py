"""Resolved providers (seed 001 objects) as raw providers of the cloud
drivers (nodepool.driver.aws, nodepool.driver.kubernetes), for
zuul-launcher: the same drivers nodepool-launcher runs, fed from Zuul's
configuration (see zuul.launcher.providers for the lookup order: label,
provider and section, then the zuul.conf connection).

AWS (``[connection NAME] driver=aws``; credentials ``access_key_id``,
``secret_access_key``, ``profile``, ``shared_credentials_file``,
``endpoint_url`` as released Zuul has them): ``region``, ``subnet-id``
(or ``subnet``) and ``security-group-id`` from the section or provider;
an image's ``image-id`` or ``image-filters`` and login settings; a
flavor's ``instance-type`` (``cloud-flavor``), ``volume-*``, ``iops``,
``throughput``, ``ebs-optimized``, ``market-type: spot``,
``public-ipv4``; a label's ``key-name``, ``tags``, ``userdata``.

Kubernetes (``driver=kubernetes``; ``kubeconfig_file``, ``context``):
each label is a pod running its image's ``image-name`` (``type: pod``,
the default) or a namespace (``type: namespace``), with the flavor's or
label's ``cpu``, ``memory``, ``storage`` and ``env``.
"""

from __future__ import annotations


def _pool(resolved, limits=(('instances', 'max-servers'),)) -> dict:
    """The one pool of a provider, with the quota limits it has."""
    pool: dict = {'name': 'main'}
    quota = resolved.settings.get('quota') or {}
    if isinstance(quota, dict):
        for src, dst in limits:
            if quota.get(src) is not None:
                pool[dst] = int(quota[src])
    return pool


def _labels(resolved, options: dict, lookup):
    """Each label with its lookup (its image's settings right after its
    own) and its image object (None: the label names none)."""
    for label in resolved.labels.values():
        look = lookup(resolved, options, label)
        image = resolved.images.get(label.image or '')
        if image is not None:
            look.layers.insert(1, image.settings)
        yield label, look, image


def _copy(look, entry: dict, keys, convert=lambda value: value) -> None:
    """The keys ``look`` has a value for, into ``entry``."""
    for key in keys:
        if look.get(key) is not None:
            entry[key] = convert(look.get(key))


def _done(raw: dict, pool: dict, labels: list, images: dict | None = None) -> dict:
    pool['labels'] = labels
    if images is not None:
        raw['cloud-images'] = list(images.values())
    raw['pools'] = [pool]
    return raw


def _aws(resolved, options: dict, lookup, common, login) -> dict:
    raw = common(resolved, options, 'aws')
    look = lookup(resolved, options)
    raw['region-name'] = str(look.get('region-name', 'region', default='us-east-1'))
    if look.get('profile-name', 'profile') is not None:
        raw['profile-name'] = str(look.get('profile-name', 'profile'))
    pool = _pool(resolved, (('instances', 'max-servers'), ('cores', 'max-cores'),
                            ('ram', 'max-ram')))
    for key, names in (('subnet-id', ('subnet-id', 'subnet')),
                       ('security-group-id', ('security-group-id',))):
        if look.get(*names) is not None:
            pool[key] = str(look.get(*names))
    if look.get('public-ipv4') is not None:
        pool['public-ipv4'] = bool(look.get('public-ipv4'))
    images: dict[str, dict] = {}
    labels = []
    for label, label_look, image in _labels(resolved, options, lookup):
        key = image.canonical_name if image else label.canonical_name
        cloud = {'name': key, **login(label_look)}
        if label_look.get('image-id') is not None:
            cloud['image-id'] = str(label_look.get('image-id'))
        elif label_look.get('image-filters') is not None:
            cloud['image-filters'] = _filters(label_look.get('image-filters'))
        else:
            cloud['image-filters'] = [{'name': 'name', 'values': [
                str(label_look.get('image-name', default=image.name if image else label.name))]}]
        images.setdefault(key, cloud)
        entry = {'name': label.canonical_name, 'cloud-image': key, **login(label_look)}
        itype = label_look.get('instance-type', 'cloud-flavor', 'flavor-name')
        if itype is not None:
            entry['instance-type'] = str(itype)
        _copy(label_look, entry, ('key-name', 'volume-type', 'volume-size', 'iops', 'throughput',
                                  'userdata', 'ebs-optimized', 'host-key-checking',
                                  'dedicated-host'))
        if label_look.get('tags'):
            entry['tags'] = {str(k): str(v) for k, v in label_look.get('tags').items()}
        if label_look.get('market-type') == 'spot':
            entry['use-spot'] = True
        labels.append(entry)
    return _done(raw, pool, labels, images)


def _filters(value) -> list[dict]:
    """``image-filters`` as a list of ``{name, values}`` (a mapping of
    name -> values is taken too)."""
    if isinstance(value, dict):
        return [{'name': str(k), 'values': [str(v)] if isinstance(v, str) else
                 [str(x) for x in v]} for k, v in value.items()]
    return [{'name': str(f['name']), 'values': [str(x) for x in f['values']]} for f in value]


def _kubernetes(resolved, options: dict, lookup, common, login, driver='kubernetes') -> dict:
    raw = common(resolved, options, driver)
    look = lookup(resolved, options)
    if look.get('context') is not None:
        raw['context'] = str(look.get('context'))
    pool = _pool(resolved)
    labels = []
    for label, label_look, image in _labels(resolved, options, lookup):
        kind = str(label_look.get('type', default='pod'))
        entry = {'name': label.canonical_name, 'type': kind, **login(label_look)}
        if kind == 'pod':
            entry['image'] = str(label_look.get('image-name',
                                                default=image.name if image else label.name))
            _copy(label_look, entry, ('cpu', 'memory', 'storage', 'env', 'node-selector',
                                      'privileged'))
        labels.append(entry)
    return _done(raw, pool, labels)


def _metastatic(resolved, options: dict, lookup, common, login) -> dict:
    """Each label is a slot of a node of its ``backing-label`` (a label
    of the same tenant: its canonical name is asked for)."""
    raw = common(resolved, options, 'metastatic')
    pool = _pool(resolved)
    labels = []
    for label in resolved.labels.values():
        label_look = lookup(resolved, options, label)
        backing = str(label_look.get('backing-label', default=''))
        if backing and '/' not in backing:
            # Label objects are named within their project.
            backing = label.canonical_name[:-len(label.name)] + backing
        entry = {'name': label.canonical_name, 'backing-label': backing, **login(label_look)}
        _copy(label_look, entry, ('max-parallel-jobs', 'grace-time'))
        labels.append(entry)
    return _done(raw, pool, labels)


def _gce(resolved, options: dict, lookup, common, login) -> dict:
    """GCE (``driver=gce``; credentials: Google's application default, or
    the connection's ``endpoint_url`` for another endpoint): ``project``,
    ``region``, ``zone`` from the section or provider; an image's
    ``image-id`` or ``image-family`` (and ``image-project``, ``key``); a
    flavor's ``instance-type``."""
    raw = common(resolved, options, 'gce')
    look = lookup(resolved, options)
    for key in ('project', 'region', 'zone'):
        raw[key] = str(look.get(key, default=''))
    pool = _pool(resolved)
    images: dict[str, dict] = {}
    labels = []
    for label, label_look, image in _labels(resolved, options, lookup):
        key = image.canonical_name if image else label.canonical_name
        cloud = {'name': key, **login(label_look)}
        _copy(label_look, cloud, ('image-id', 'image-project', 'image-family', 'key'), str)
        images.setdefault(key, cloud)
        entry = {'name': label.canonical_name, 'cloud-image': key, **login(label_look),
                 'instance-type': str(label_look.get('instance-type', 'cloud-flavor',
                                                     default=''))}
        _copy(label_look, entry, ('volume-type', 'volume-size'))
        labels.append(entry)
    return _done(raw, pool, labels, images)


def _azure(resolved, options: dict, lookup, common, login) -> dict:
    """Azure (``driver=azure``; ``auth_path``: the service principal
    file): ``location`` (or ``region``), ``resource-group``, ``subnet-id``
    from the section or provider; an image's ``image-reference`` (or
    ``image-id``), ``username`` and ``key``; a flavor's ``vm-size``
    (``instance-type``)."""
    raw = common(resolved, options, 'azure')
    look = lookup(resolved, options)
    raw['location'] = str(look.get('location', 'region', default=''))
    raw['resource-group'] = str(look.get('resource-group', default='nodepool'))
    raw['auth-path'] = str(look.get('auth-path', default=''))
    if look.get('subnet-id') is not None:
        raw['subnet-id'] = str(look.get('subnet-id'))
    pool = _pool(resolved)
    images: dict[str, dict] = {}
    labels = []
    for label, label_look, image in _labels(resolved, options, lookup):
        key = image.canonical_name if image else label.canonical_name
        cloud = {'name': key, **login(label_look)}
        _copy(label_look, cloud, ('image-reference', 'image-id', 'key'))
        images.setdefault(key, cloud)
        size = label_look.get('vm-size', 'instance-type', 'cloud-flavor', default='')
        entry = {'name': label.canonical_name, 'cloud-image': key, **login(label_look),
                 'hardware-profile': {'vm-size': str(size)}}
        if label_look.get('tags'):
            entry['tags'] = {str(k): str(v) for k, v in label_look.get('tags').items()}
        labels.append(entry)
    return _done(raw, pool, labels, images)
