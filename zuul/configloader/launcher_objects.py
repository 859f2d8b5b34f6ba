"""Seed 001's node and image stanzas: ``image``, ``flavor``, ``label``,
``section`` and ``provider``; and ``resolve_providers``, which applies
them to each other in the seed's override order.

The parsers check each stanza on its own (attribute names and types).
References between the objects (a label's image and flavor, a section's
parent, a provider's section and labels) are checked by
``resolve_providers``, which the layout loader runs once every object of
the tenant is loaded; its errors name the object at fault.

Attribute names follow released Zuul where it has them (``flavor-name``,
``image-id``, ``image-defaults`` ...) and the seed where it differs
(``cloud-flavor``, ``include-all-node-labels``, a provider's ``image:``
spelling of ``images:``). Unknown keys are errors.
"""

from __future__ import annotations

import voluptuous as vs

from zuul.configloader.schema import line_of, validate
from zuul.lib import yamlutil
from zuul.model.errors import ConfigError, ConfigurationError, SourceContext
from zuul.model.launcher import (
    IMAGE_TYPES,
    FlavorObject,
    ImageObject,
    LabelObject,
    ProviderObject,
    ResolvedImage,
    ResolvedLabel,
    ResolvedProvider,
    SectionObject,
    canonical_name,
    merge_settings,
)

_scalar = vs.Any(str, int, float, bool)

# Image attributes: on an ``image`` stanza, an ``images`` entry of a
# section or provider, or their ``image-defaults``.
IMAGE_ATTRIBUTES = {
    'username': str, 'python-path': str, 'shell-type': str, 'connection-type': str,
    'connection-port': int, 'config-drive': bool, 'userdata': str,
    'import-timeout': int, 'image-name': str, 'image-id': str,
    # AWS: {name: values} or released Nodepool's [{name, values}].
    'image-filters': vs.Any(dict, [{vs.Required('name'): str, vs.Required('values'): [str]}]),
    # GCE: an image family (of another project) and the login key.
    'image-family': str, 'image-project': str, 'key': str,
    # Azure: a marketplace image.
    'image-reference': {vs.Required('publisher'): str, vs.Required('offer'): str,
                        vs.Required('sku'): str, vs.Required('version'): str},
    'volume-size': int, 'volume-type': str, 'architecture': str, 'branch': str,
    'host-key-checking': bool,
    # Zuul-built images (``type: zuul``): the builds to keep in service and
    # the formats the build job should produce for this provider.
    'keep': vs.All(int, vs.Range(min=1)), 'formats': [str],
}
# Flavor attributes: a ``flavor`` stanza, a ``flavors`` entry, ``flavor-defaults``.
FLAVOR_ATTRIBUTES = {
    'cloud-flavor': str, 'flavor-name': str, 'instance-type': str,
    'public-ipv4': bool, 'public-ipv6': bool, 'userdata': str, 'volume-size': int,
    'volume-type': str, 'dedicated-host': bool, 'ebs-optimized': bool,
    'market-type': str, 'iops': int, 'throughput': int, 'vm-size': str,
}
# Launch attributes: a ``label`` stanza, a ``labels`` entry, ``label-defaults``.
LABEL_ATTRIBUTES = {
    'min-ready': vs.All(int, vs.Range(min=0)), 'max-ready-age': vs.All(int, vs.Range(min=0)),
    'key-name': str, 'tags': {str: _scalar}, 'userdata': str, 'boot-timeout': int,
    'launch-timeout': int, 'host-key-checking': bool, 'networks': [str],
    'security-groups': [str], 'instance-properties': {str: _scalar},
    'volume-size': int, 'volume-type': str, 'public-ipv4': bool, 'public-ipv6': bool,
    # Kubernetes: a pod (the image's image-name) or a namespace, and the
    # pod's requests and environment.
    'type': vs.Any('pod', 'namespace'), 'cpu': int, 'memory': int, 'storage': int,
    'env': [{vs.Required('name'): str, 'value': str}],
    # Metastatic: the label whose nodes this one's are slots of.
    'backing-label': str, 'max-parallel-jobs': vs.All(int, vs.Range(min=1)),
    'grace-time': vs.All(int, vs.Range(min=0)),
}
# Static nodes (a section's or provider's ``nodes``), as nodepool's static
# driver has them.
STATIC_NODE = {
    vs.Required('name'): str, vs.Required('labels'): vs.Any(str, [str]),
    'username': str, 'host-key': vs.Any(str, [str]), 'connection-port': int,
    'connection-type': str, 'python-path': str, 'shell-type': str,
    'host-key-checking': bool, 'timeout': int, 'max-parallel-jobs': int,
    'description': str,
}
# Provider-level attributes of a section or provider (besides launch
# attributes and the image/flavor attributes that make sense as defaults).
PROVIDER_ATTRIBUTES = {
    'boot-timeout': int, 'launch-timeout': int, 'launch-attempts': vs.All(int, vs.Range(min=1)),
    'quota': {'instances': int, 'cores': int, 'ram': int},
    'region': str, 'availability-zones': [str], 'subnet': str,
    # AWS and Kubernetes (see zuul.launcher.cloud_providers).
    'subnet-id': str, 'security-group-id': str, 'context': str, 'project': str, 'zone': str,
    'location': str, 'resource-group': str,
    'floating-ip-cleanup': bool, 'port-cleanup-interval': int,
    'nodes': [STATIC_NODE],
}
# Top-level keys that describe the provider, not a node: kept out of
# label settings.
PROVIDER_ONLY = ('nodes', 'quota', 'launch-attempts', 'floating-ip-cleanup',
                 'port-cleanup-interval')
_NOT_TOP = ('image-name', 'image-id', 'image-filters', 'cloud-flavor', 'flavor-name',
            'instance-type', 'min-ready', 'max-ready-age')
TOP_ATTRIBUTES = {k: v for k, v in {**IMAGE_ATTRIBUTES, **FLAVOR_ATTRIBUTES,
                                    **LABEL_ATTRIBUTES, **PROVIDER_ATTRIBUTES}.items()
                  if k not in _NOT_TOP}

_IMAGE_ENTRY = vs.Any(str, {vs.Required('name'): str, 'description': str,
                            'type': vs.Any(*IMAGE_TYPES), **IMAGE_ATTRIBUTES})
_FLAVOR_ENTRY = vs.Any(str, {vs.Required('name'): str, 'description': str,
                             **FLAVOR_ATTRIBUTES})
_LABEL_ENTRY = vs.Any(str, {vs.Required('name'): str, 'description': str,
                            **LABEL_ATTRIBUTES})
_SHARED = {
    'description': str, 'images': [_IMAGE_ENTRY], 'flavors': [_FLAVOR_ENTRY],
    'labels': [_LABEL_ENTRY], 'image-defaults': IMAGE_ATTRIBUTES,
    'flavor-defaults': FLAVOR_ATTRIBUTES, 'label-defaults': LABEL_ATTRIBUTES,
    **TOP_ATTRIBUTES,
}

IMAGE_SCHEMA = vs.Schema({vs.Required('name'): str, vs.Required('type'): vs.Any(*IMAGE_TYPES),
                          'description': str, **IMAGE_ATTRIBUTES})
FLAVOR_SCHEMA = vs.Schema({vs.Required('name'): str, 'description': str,
                           **FLAVOR_ATTRIBUTES})
LABEL_SCHEMA = vs.Schema({vs.Required('name'): str, 'image': str, 'flavor': str,
                          'description': str, **LABEL_ATTRIBUTES})
SECTION_SCHEMA = vs.Schema({vs.Required('name'): str, 'parent': str, 'abstract': bool,
                            'connection': vs.Any(str, None), **_SHARED})
PROVIDER_SCHEMA = vs.Schema({vs.Required('name'): str, vs.Required('section'): str,
                             'image': [_IMAGE_ENTRY], 'include-all-node-labels': bool,
                             **_SHARED})

_STRUCTURE = ('name', 'description', 'parent', 'abstract', 'connection', 'section',
              'images', 'image', 'flavors', 'labels', 'image-defaults',
              'flavor-defaults', 'label-defaults', 'include-all-node-labels')


def plain(value):
    """Configuration data without YAML marks or tag wrappers (JSON-able,
    deep-copyable, comparable)."""
    value = yamlutil.unwrap(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def project_canonical(sc: SourceContext) -> str:
    if not sc.project:
        return ''
    if sc.canonical_hostname and not sc.project.startswith(sc.canonical_hostname + '/'):
        return f'{sc.canonical_hostname}/{sc.project}'
    return sc.project


def _base(conf, sc: SourceContext, schema) -> dict:
    raw = plain(dict(conf))
    validate(schema, raw)
    return {'name': raw['name'], 'source_context': sc, 'start_line': line_of(conf),
            'canonical_name': canonical_name(project_canonical(sc), raw['name']),
            'description': raw.get('description'), 'raw': raw}


def _settings(raw: dict, exclude=()) -> dict:
    return {k: v for k, v in raw.items() if k not in _STRUCTURE and k not in exclude}


def _entries(values, what: str) -> dict:
    """A list of names or {name: ..., attrs} -> {name: attrs}."""
    out: dict[str, dict] = {}
    for value in values or ():
        entry = {'name': value} if isinstance(value, str) else dict(value)
        name = entry.pop('name')
        entry.pop('description', None)
        if name in out:
            raise ConfigurationError(f'{what} "{name}" is listed twice')
        out[name] = entry
    return out


class LauncherObjectParser:
    """One ``parse_<kind>`` per stanza; each returns the model object or
    raises ConfigurationError."""

    def __init__(self, context=None):
        self.context = context

    def parse(self, kind: str, conf, sc: SourceContext):
        return getattr(self, f'parse_{kind}')(conf, sc)

    def parse_image(self, conf, sc: SourceContext) -> ImageObject:
        base = _base(conf, sc, IMAGE_SCHEMA)
        return ImageObject(type=base['raw']['type'],
                           settings=_settings(base['raw'], ('type',)), **base)

    def parse_flavor(self, conf, sc: SourceContext) -> FlavorObject:
        base = _base(conf, sc, FLAVOR_SCHEMA)
        return FlavorObject(settings=_settings(base['raw']), **base)

    def parse_label(self, conf, sc: SourceContext) -> LabelObject:
        base = _base(conf, sc, LABEL_SCHEMA)
        raw = base['raw']
        return LabelObject(image=raw.get('image'), flavor=raw.get('flavor'),
                           min_ready=raw.get('min-ready', 0),
                           max_ready_age=raw.get('max-ready-age', 0),
                           settings=_settings(raw, ('image', 'flavor')), **base)

    def parse_section(self, conf, sc: SourceContext) -> SectionObject:
        if not sc.trusted:
            raise ConfigurationError('sections may only be defined in config projects '
                                     '(they name connections and carry cloud settings)')
        base = _base(conf, sc, SECTION_SCHEMA)
        raw = base['raw']
        return SectionObject(parent=raw.get('parent'), abstract=raw.get('abstract', False),
                             has_connection='connection' in raw,
                             connection=raw.get('connection'),
                             **self._shared(raw), **base)

    def parse_provider(self, conf, sc: SourceContext) -> ProviderObject:
        base = _base(conf, sc, PROVIDER_SCHEMA)
        raw = base['raw']
        if raw.get('nodes') and not sc.trusted:
            raise ConfigurationError('static "nodes" may only be added by providers in '
                                     'config projects (Zuul would connect to any host '
                                     'they name)')
        if 'image' in raw and 'images' in raw:
            raise ConfigurationError('use either "images" or "image" (the same list), '
                                     'not both')
        return ProviderObject(section=raw['section'],
                              include_all_node_labels=raw.get('include-all-node-labels',
                                                              False),
                              **self._shared(raw), **base)

    @staticmethod
    def _shared(raw: dict) -> dict:
        return {'settings': _settings(raw),
                'images': _entries(raw.get('images', raw.get('image')), 'image'),
                'flavors': _entries(raw.get('flavors'), 'flavor'),
                'labels': _entries(raw.get('labels'), 'label'),
                'image_defaults': raw.get('image-defaults', {}),
                'flavor_defaults': raw.get('flavor-defaults', {}),
                'label_defaults': raw.get('label-defaults', {})}


# -- resolution ----------------------------------------------------------------


def resolve_providers(layout, tenant=None, errors=None,
                      connections: dict | None = None) -> dict[str, ResolvedProvider]:
    """Every provider of ``layout`` with everything applied in the seed's
    override order, by canonical name.

    Pure: it reads the layout and changes nothing, so it may be called on
    any layout (the loader stores the result as
    ``layout.resolved_providers``). These objects are non-speculative:
    only the tenant's live layout (built from merged config) is what
    zuul-launcher serves; a speculative layout's result is for checking a
    proposed change, never for publishing.

    ``errors`` (a ConfigErrorList or None) receives one ConfigError per
    problem, on the object at fault: unknown image/flavor of a label,
    unknown parent of a section, an inheritance cycle, unknown section or
    label of a provider, ... A broken label or provider is left out; the
    rest still resolves. ``connections`` maps zuul.conf connection names to
    driver names (None: not checked)."""
    return _Resolver(layout, tenant, errors, connections).run()


class _Resolver:
    def __init__(self, layout, tenant, errors, connections):
        self.layout = layout
        self.tenant_name = getattr(tenant, 'name', None) or layout.tenant_name
        self.errors = errors
        self.connections = connections
        self.chains: dict[str, list | None] = {}
        self.bad_labels: set[str] = set()

    def error(self, obj, kind: str, reason: str, severity: str = 'error') -> None:
        if self.errors is None:
            return
        sc = obj.source_context
        self.errors.add(ConfigError(reason, path=sc.path, line=obj.start_line,
                                    object_type=kind, object_name=obj.name,
                                    project=sc.project, branch=sc.branch,
                                    severity=severity))

    def run(self) -> dict[str, ResolvedProvider]:
        self._check_labels()
        for section in self._objects('sections'):
            self._check_section(section)
        out = {}
        for provider in self._objects('providers'):
            resolved = self._provider(provider)
            if resolved is not None:
                out[resolved.canonical_name] = resolved
        return out

    def _objects(self, table: str):
        return list(getattr(self.layout, table, {}).values())

    # -- checks of single objects ------------------------------------------------

    def _check_labels(self) -> None:
        for label in self._objects('labels'):
            for attr, table in (('image', 'images'), ('flavor', 'flavors')):
                ref = getattr(label, attr)
                if ref and ref not in getattr(self.layout, table):
                    self.error(label, 'label', f'unknown {attr} "{ref}"')
                    self.bad_labels.add(label.name)

    def _check_section(self, section: SectionObject) -> None:
        self._chain(section)
        self._check_entries(section, 'section')
        if section.has_connection and section.connection is not None and \
                self.connections is not None and section.connection not in self.connections:
            self.error(section, 'section', f'unknown connection "{section.connection}" '
                       '(not in zuul.conf)', severity='warning')

    def _check_entries(self, obj, kind: str) -> None:
        for attr, table in (('images', 'images'), ('flavors', 'flavors'),
                            ('labels', 'labels')):
            known = getattr(self.layout, table)
            for name in getattr(obj, attr):
                if name not in known:
                    self.error(obj, kind, f'{attr}: unknown {table[:-1]} "{name}"')
        for name, entry in obj.images.items():
            image = self.layout.images.get(name)
            if image is not None and entry.get('type', image.type) != image.type:
                self.error(obj, kind, f'images: "{name}" is a {image.type} image, not '
                           f'{entry["type"]}')

    def _chain(self, section: SectionObject, visiting: tuple = ()) -> list | None:
        """The section and its parents, root first; None if broken (the
        error is reported once, on the section that names the problem)."""
        if section.name in self.chains:
            return self.chains[section.name]
        chain = None
        if not section.parent:
            chain = [section]
        else:
            parent = self.layout.sections.get(section.parent)
            path = visiting + (section.name,)
            if parent is None:
                self.error(section, 'section', f'unknown parent section "{section.parent}"')
            elif parent.name in path:
                names = ' -> '.join(path[path.index(parent.name):] + (parent.name,))
                self.error(section, 'section', f'section inheritance cycle: {names}')
            else:
                above = self._chain(parent, path)
                chain = None if above is None else above + [section]
        self.chains[section.name] = chain
        return chain

    # -- providers ---------------------------------------------------------------

    def _provider(self, provider: ProviderObject) -> ResolvedProvider | None:
        self._check_entries(provider, 'provider')
        section = self.layout.sections.get(provider.section)
        if section is None:
            self.error(provider, 'provider', f'unknown section "{provider.section}"')
            return None
        if section.abstract:
            self.error(provider, 'provider', f'section "{section.name}" is abstract: it '
                       'may only be a parent of other sections')
            return None
        chain = self._chain(section)
        if chain is None:
            self.error(provider, 'provider', f'section "{section.name}" has errors')
            return None
        connection = self._connection(provider, chain)
        if connection is False:
            return None
        settings: dict = {}
        for level in chain + [provider]:
            settings = merge_settings(settings, level.settings)
        if settings.get('nodes') and connection is not None and self.connections is not None \
                and self.connections.get(connection) not in (None, 'static'):
            self.error(provider, 'provider', f'static "nodes" need a section with '
                       f'"connection: null" (or a static connection), not "{connection}"')
            return None
        resolved = ResolvedProvider(
            canonical_name=provider.canonical_name, name=provider.name,
            section=section.canonical_name, connection=connection, settings=settings,
            tenants=[self.tenant_name] if self.tenant_name else [],
            source=provider.location)
        for name in self._image_names(chain, provider):
            image = self.layout.images.get(name)
            if image is not None:
                resolved.images[image.canonical_name] = self._image(image, chain, provider)
        for name in self._label_names(provider, settings):
            label = self.layout.labels.get(name)
            if label is None or name in self.bad_labels:
                continue
            if self._label_usable(provider, label, chain):
                resolved.labels[label.canonical_name] = self._label(label, chain, provider)
        return resolved

    def _connection(self, provider, chain):
        for section in reversed(chain):
            if section.has_connection:
                return section.connection
        self.error(provider, 'provider', f'section "{chain[-1].name}" (and its parents) '
                   'name no connection; static nodes use "connection: null"')
        return False

    @staticmethod
    def _image_names(chain, provider) -> list[str]:
        names: list[str] = []
        for level in chain + [provider]:
            names.extend(n for n in level.images if n not in names)
        return names

    def _label_names(self, provider: ProviderObject, settings: dict) -> list[str]:
        names = list(provider.labels)
        if provider.include_all_node_labels:
            for node in settings.get('nodes') or ():
                labels = node.get('labels')
                for name in [labels] if isinstance(labels, str) else labels or ():
                    if name in names:
                        continue
                    if name not in self.layout.labels:
                        self.error(provider, 'provider', f'include-all-node-labels: node '
                                   f'"{node["name"]}" has the label "{name}", which is '
                                   'not defined')
                        continue
                    names.append(name)
        return names

    def _label_usable(self, provider, label: LabelObject, chain) -> bool:
        for attr in ('image', 'flavor'):
            ref = getattr(label, attr)
            if ref and not any(ref in getattr(level, attr + 's')
                               for level in chain + [provider]):
                self.error(provider, 'provider', f'label "{label.name}" uses the {attr} '
                           f'"{ref}", which neither the provider nor section '
                           f'"{chain[-1].name}" (or its parents) lists in {attr}s')
                return False
        return True

    def _image(self, image: ImageObject, chain, provider) -> ResolvedImage:
        settings = dict(image.settings)
        for level in chain + [provider]:
            settings = merge_settings(settings, level.image_defaults)
            settings = merge_settings(settings, _without_type(level.images.get(image.name)))
        return ResolvedImage(canonical_name=image.canonical_name, name=image.name,
                             type=image.type, settings=settings)

    def _label(self, label: LabelObject, chain, provider) -> ResolvedLabel:
        image = self.layout.images.get(label.image) if label.image else None
        flavor = self.layout.flavors.get(label.flavor) if label.flavor else None
        s: dict = {}
        # 1-3: image stanza < flavor stanza < label stanza
        for obj in (image, flavor, label):
            if obj is not None:
                s = merge_settings(s, obj.settings)
        # 4: section top level (parents first), with its label-defaults
        for section in chain:
            s = merge_settings(s, _top(section.settings))
            s = merge_settings(s, section.label_defaults)
        # 5-6: image within section, flavor within section; then the
        # section's own entry for the label (the most specific section level)
        s = self._entries(s, chain, label, image, flavor)
        # 7: provider top level, then its image/flavor entries
        s = merge_settings(s, _top(provider.settings))
        s = merge_settings(s, provider.label_defaults)
        s = self._entries(s, [provider], label, image, flavor, labels=False)
        # 8: label within provider
        s = merge_settings(s, provider.labels.get(label.name) or {})
        return ResolvedLabel(canonical_name=label.canonical_name, name=label.name,
                             image=image.canonical_name if image else None,
                             flavor=flavor.canonical_name if flavor else None,
                             min_ready=s.pop('min-ready', 0),
                             max_ready_age=s.pop('max-ready-age', 0), settings=s)

    @staticmethod
    def _entries(s, levels, label, image, flavor, labels=True) -> dict:
        if image is not None:
            for level in levels:
                s = merge_settings(s, level.image_defaults)
                s = merge_settings(s, _without_type(level.images.get(image.name)))
        if flavor is not None:
            for level in levels:
                s = merge_settings(s, level.flavor_defaults)
                s = merge_settings(s, level.flavors.get(flavor.name) or {})
        if labels:
            for level in levels:
                s = merge_settings(s, level.labels.get(label.name) or {})
        return s


def _top(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if k not in PROVIDER_ONLY}


def _without_type(entry) -> dict:
    return {k: v for k, v in (entry or {}).items() if k != 'type'}


# -- read-only views (zuul-web, zuul CLI) ------------------------------------------

LISTABLE = ('images', 'flavors', 'labels', 'providers')


def object_summaries(layout, kind: str) -> list[dict]:
    """The public view of a layout's ``images``/``flavors``/``labels``/
    ``providers``, sorted by name: names, references and where each is
    defined; never settings. A provider shows its section, its connection
    and the labels and images it serves once resolved (empty if it has
    errors)."""
    if kind not in LISTABLE:
        raise ValueError(f'not a listable launcher object type: {kind}')
    resolved = getattr(layout, 'resolved_providers', {}) or {}
    out = []
    for name in sorted(getattr(layout, kind, {})):
        obj = getattr(layout, kind)[name]
        entry = obj.summary()
        if kind == 'providers':
            rp = resolved.get(obj.canonical_name)
            entry['connection'] = rp.connection if rp else None
            entry['labels'] = sorted(label.name for label in rp.labels.values()) if rp else []
            entry['images'] = sorted(image.name for image in rp.images.values()) if rp else []
        out.append(entry)
    return out
