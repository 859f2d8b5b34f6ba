"""Seed 001's node and image objects: ``image``, ``flavor``, ``label``,
``section`` and ``provider`` as loaded from a tenant's config, and the
*resolved* provider the scheduler publishes for zuul-launcher.

Two layers:

- The config objects (``ImageObject`` ... ``ProviderObject``) are what
  zuul/configloader/launcher_objects.py builds from YAML, one per stanza,
  with their source context.  They are tenant-scoped singletons: a name
  appears once per tenant (an identical definition on another branch of
  the same project is accepted, as for pipelines).
- ``ResolvedProvider`` (with ``ResolvedLabel`` and ``ResolvedImage``) is a
  provider with everything applied in the seed's override order, so a
  launcher needs nothing else to launch a node:

      image stanza < flavor stanza < label stanza < section (top level)
      < image within section < flavor within section < provider (top level)
      < label within provider

  (scalars override, dicts merge, lists concatenate; section inheritance
  applies parent before child).  It is JSON-serialisable
  (``to_dict``/``from_dict``) and is what the scheduler writes to
  ZooKeeper (``/zuul/launcher/providers/<quoted canonical name>``) after
  every (re)configuration, and what every zuul-launcher reads.

Canonical names: ``<canonical project name>/<short name>``, e.g.
``review.example.org/opendev/images/ubuntu``.  Node requests for
zuul-launcher carry canonical label names; users only ever write short
names.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from urllib.parse import quote

from zuul.model.base import ConfigObject

RESOLVED_SCHEMA_VERSION = 1

IMAGE_TYPES = ('cloud', 'zuul')


def canonical_name(project_canonical: str, name: str) -> str:
    return f'{project_canonical}/{name}' if project_canonical else name


def quote_name(canonical: str) -> str:
    """A canonical name as one ZooKeeper path component."""
    return quote(canonical, safe='')


def merge_settings(base: dict, over: dict) -> dict:
    """The seed's rule: scalars override, dicts merge, lists concatenate."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = merge_settings(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            out[key] = old + copy.deepcopy(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# -- resolved form (the wire contract between scheduler and zuul-launcher) ------


@dataclass
class ResolvedImage:
    canonical_name: str
    name: str
    type: str                      # 'cloud' or 'zuul'
    #: Everything known about the image in this provider, merged in the
    #: seed's order (image stanza, image within section, image within
    #: provider): ``image-name``/``image-id`` for cloud images,
    #: ``username``, ``python-path``, ``shell-type``, ``config-drive``, ...
    settings: dict = field(default_factory=dict)


@dataclass
class ResolvedLabel:
    canonical_name: str
    name: str
    image: str | None              # canonical image name
    flavor: str | None             # canonical flavor name
    min_ready: int = 0
    max_ready_age: int = 0
    #: Launch settings after the full override order (image, flavor,
    #: label, section, image-in-section, flavor-in-section, provider,
    #: label-in-provider).
    settings: dict = field(default_factory=dict)


@dataclass
class ResolvedProvider:
    canonical_name: str
    name: str
    section: str                   # canonical name of the section it inherits
    connection: str | None         # zuul.conf connection; None: static nodes
    #: Provider-level settings: the section chain (root first) then the
    #: provider's own top-level keys (``boot-timeout``, ``launch-timeout``,
    #: ``launch-attempts``, ``quota``, ``region``, ``nodes`` for static
    #: sections, driver-specific keys ...).
    settings: dict = field(default_factory=dict)
    labels: dict[str, ResolvedLabel] = field(default_factory=dict)
    images: dict[str, ResolvedImage] = field(default_factory=dict)
    #: The tenants whose layouts define this provider.
    tenants: list[str] = field(default_factory=list)
    #: Where it is defined (for messages): ``project:branch:path:line``.
    source: str = ''

    def to_dict(self) -> dict:
        d = asdict(self)
        d['schema_version'] = RESOLVED_SCHEMA_VERSION
        return d

    @classmethod
    def from_dict(cls, data: dict) -> ResolvedProvider:
        version = data.get('schema_version')
        if version != RESOLVED_SCHEMA_VERSION:
            raise ValueError(f'resolved provider schema version {version!r} '
                             f'(this Zuul reads {RESOLVED_SCHEMA_VERSION})')
        data = {k: v for k, v in data.items() if k != 'schema_version'}
        data['labels'] = {k: ResolvedLabel(**v) for k, v in data.get('labels', {}).items()}
        data['images'] = {k: ResolvedImage(**v) for k, v in data.get('images', {}).items()}
        return cls(**data)

    def label_by_name(self, name: str) -> ResolvedLabel | None:
        """A label by canonical or short name."""
        if name in self.labels:
            return self.labels[name]
        for label in self.labels.values():
            if label.name == name:
                return label
        return None


# -- config objects (one per stanza, as loaded) ----------------------------------


@dataclass(eq=False)
class LauncherConfigObject(ConfigObject):
    """Common part of the five stanzas: the short ``name`` (unique in a
    tenant), the ``canonical_name`` (``<canonical project>/<name>``), and
    ``raw``: the validated stanza as plain data (what ``same_definition``
    compares, and where parsers keep keys they do not interpret)."""

    canonical_name: str = ''
    description: str | None = None
    raw: dict = field(default_factory=dict)

    def content(self):
        return (self.canonical_name, repr(sorted(self.raw.items())))

    def summary(self) -> dict:
        """The public, read-only view (zuul-web, ``zuul`` CLI): names and
        references only, never settings (a section's settings may name
        keys and networks an operator would rather not publish)."""
        return {'name': self.name, 'canonical_name': self.canonical_name,
                'description': self.description,
                'source_context': {'project': self.source_context.project,
                                   'branch': self.source_context.branch,
                                   'path': self.source_context.path}}


@dataclass(eq=False)
class ImageObject(LauncherConfigObject):
    type: str = 'cloud'                 # 'cloud' or 'zuul'
    #: Image attributes given on the stanza itself (``username``,
    #: ``python-path``, ``image-name`` ...): the first level of the
    #: override order.
    settings: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {**super().summary(), 'type': self.type}


@dataclass(eq=False)
class FlavorObject(LauncherConfigObject):
    settings: dict = field(default_factory=dict)


@dataclass(eq=False)
class LabelObject(LauncherConfigObject):
    image: str | None = None            # short names, as written
    flavor: str | None = None
    min_ready: int = 0
    max_ready_age: int = 0
    settings: dict = field(default_factory=dict)

    def summary(self) -> dict:
        return {**super().summary(), 'image': self.image, 'flavor': self.flavor,
                'min_ready': self.min_ready, 'max_ready_age': self.max_ready_age}


@dataclass(eq=False)
class AttachingObject(LauncherConfigObject):
    """What sections and providers share: top-level settings and the
    images, flavors and labels they attach, each with per-object
    attributes."""

    #: Top-level settings (``boot-timeout``, ``quota``, ``nodes`` ...).
    settings: dict = field(default_factory=dict)
    #: ``images``/``flavors``/``labels`` entries: short name -> attributes.
    images: dict = field(default_factory=dict)
    flavors: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)
    image_defaults: dict = field(default_factory=dict)
    flavor_defaults: dict = field(default_factory=dict)
    label_defaults: dict = field(default_factory=dict)


@dataclass(eq=False)
class SectionObject(AttachingObject):
    parent: str | None = None
    abstract: bool = False
    #: True when the stanza says ``connection:`` (even ``connection: null``).
    has_connection: bool = False
    connection: str | None = None

    def summary(self) -> dict:
        return {**super().summary(), 'parent': self.parent, 'abstract': self.abstract,
                'connection': self.connection}


@dataclass(eq=False)
class ProviderObject(AttachingObject):
    section: str = ''
    include_all_node_labels: bool = False

    def summary(self) -> dict:
        return {**super().summary(), 'section': self.section,
                'labels': sorted(self.labels)}
