"""nodepool.yaml's top-level ``diskimages:``: the images the builder
builds, with released Nodepool's keys and ``parent``/``abstract``
inheritance.

    diskimages:
      - name: base
        abstract: true
        elements: [vm, simple-init]
        env-vars: {TMPDIR: /opt/dib_tmp}
      - name: ubuntu-jammy
        parent: base
        elements: [ubuntu-minimal]      # appended to the parent's
        release: jammy
        env-vars: {DIB_DEBIAN_COMPONENTS: main}   # merged over the parent's
        rebuild-age: 86400

A child inherits every key its parent sets; ``elements`` are the
parent's followed by its own, ``env-vars`` the parent's updated with its
own; every other key the child sets replaces the parent's.  An abstract
diskimage is never built and cannot be used by a provider.

Called from ``nodepool.config`` (which owns the collector of issues and
the cross-checks against providers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import voluptuous as v

DEFAULT_DIB_CMD = 'disk-image-create'
DEFAULT_REBUILD_AGE = 86400
DEFAULT_BUILD_TIMEOUT = 8 * 3600
DEFAULT_USERNAME = 'zuul'

# The keys a diskimage may have, and their types (released Nodepool's).
DISKIMAGE_KEYS = {
    v.Required('name'): str,
    'abstract': bool,
    'parent': str,
    'pause': bool,
    'rebuild-age': int,
    'build-timeout': int,
    'elements': [str],
    'env-vars': {str: v.Any(str, int, float, bool)},
    'formats': [str],
    'release': v.Any(str, int, float),
    'username': str,
    'python-path': str,
    'shell-type': str,
    'dib-cmd': str,
    'connection-type': str,
    'connection-port': int,
    'meta': dict,
    'delete-after-upload': bool,
    'keep-formats': [str],
}

# Keys of released Nodepool that this builder accepts and ignores.
IGNORED_KEYS = ('checksum', 'build-checksum', 'image-types')

DISKIMAGE = v.Schema(DISKIMAGE_KEYS, extra=v.ALLOW_EXTRA)

_DASHED = {
    'rebuild-age': 'rebuild_age', 'build-timeout': 'build_timeout', 'env-vars': 'env_vars',
    'python-path': 'python_path', 'shell-type': 'shell_type', 'dib-cmd': 'dib_cmd',
    'connection-type': 'connection_type', 'connection-port': 'connection_port',
    'delete-after-upload': 'delete_after_upload', 'keep-formats': 'keep_formats',
}


@dataclass
class DiskImage:
    """One top-level diskimage, with its parent's settings folded in."""

    name: str
    elements: list[str] = field(default_factory=list)
    release: str | None = None
    env_vars: dict[str, str] = field(default_factory=dict)
    formats: list[str] = field(default_factory=list)
    rebuild_age: int = DEFAULT_REBUILD_AGE
    build_timeout: int = DEFAULT_BUILD_TIMEOUT
    #: The build command; ``disk-image-create`` unless ``dib-cmd`` is set.
    dib_cmd: str = DEFAULT_DIB_CMD
    pause: bool = False
    username: str = DEFAULT_USERNAME
    python_path: str = 'auto'
    shell_type: str | None = None
    connection_type: str = 'ssh'
    connection_port: int = 22
    meta: dict = field(default_factory=dict)
    #: Delete the build's files once every provider that takes the image
    #: (and is not paused) has a ready upload of it, but for the
    #: ``keep_formats``; the build stays in service.
    delete_after_upload: bool = False
    keep_formats: list[str] = field(default_factory=list)
    parent: str | None = None
    abstract: bool = False
    #: The line of its entry in nodepool.yaml (for messages).
    line: int | None = None


def _apply(image: DiskImage, raw: dict) -> None:
    """Lay ``raw``'s keys over ``image`` (the inheritance rule)."""
    for key, value in raw.items():
        attr = _DASHED.get(key, key)
        if key in ('name', 'abstract', 'parent') or not hasattr(image, attr):
            continue
        if key == 'elements':
            image.elements = [*image.elements, *value]
        elif key == 'env-vars':
            image.env_vars = {**image.env_vars, **{k: _env_str(val) for k, val in value.items()}}
        elif key == 'release':
            image.release = str(value)
        elif key in ('formats', 'keep-formats', 'meta'):
            setattr(image, attr, dict(value) if key == 'meta' else list(value))
        else:
            setattr(image, attr, value)


def _env_str(value) -> str:
    if isinstance(value, bool):
        return 'true' if value else 'false'
    return str(value)


def build_diskimages(raw_list: list, add) -> dict[str, DiskImage]:
    """Typed diskimages from the validated list.  ``add(where, message,
    severity=...)`` reports an issue at a path under ``diskimages``."""
    by_name: dict[str, tuple[int, dict]] = {}
    for i, raw in enumerate(raw_list):
        name = raw['name']
        if name in by_name:
            add([i, 'name'], f'diskimage {name!r} is defined twice')
            continue
        by_name[name] = (i, raw)
        for key in raw:
            if key in IGNORED_KEYS:
                add([i, key], f'diskimage {name!r}: {key!r} is not supported by this '
                              'builder and is ignored', severity='warning')
            elif key not in {getattr(k, 'schema', k) for k in DISKIMAGE_KEYS}:
                # A warning, not an error: released Nodepool's own
                # documentation has an example with a stray key.
                add([i, key], f'diskimage {name!r}: unknown key {key!r} is ignored',
                    severity='warning')
    images: dict[str, DiskImage] = {}
    for name in by_name:
        image = _resolve(name, by_name, add)
        if image is not None:
            images[name] = image
    for name, image in images.items():
        i = by_name[name][0]
        if image.keep_formats and not image.delete_after_upload and not image.abstract:
            add([i, 'keep-formats'], f'diskimage {name!r}: keep-formats has no effect '
                                     'without delete-after-upload', severity='warning')
        if not image.abstract and not image.elements and image.dib_cmd == DEFAULT_DIB_CMD:
            add([i], f'diskimage {name!r} has no elements: disk-image-create would have '
                     'nothing to build (set elements, or dib-cmd for your own command)',
                severity='warning')
    return images


def _resolve(name: str, by_name: dict, add) -> DiskImage | None:
    """Fold the parent chain of ``name`` (root first) into one image."""
    chain = []
    current = name
    while current is not None:
        if current in chain:
            add([by_name[name][0], 'parent'],
                f'diskimage {name!r}: parent chain loops ({" -> ".join([*chain, current])})')
            return None
        if current not in by_name:
            add([by_name[chain[-1]][0], 'parent'],
                f'diskimage {chain[-1]!r}: parent {current!r} is not a diskimage')
            return None
        chain.append(current)
        current = by_name[current][1].get('parent')
    i, raw = by_name[name]
    image = DiskImage(name=name, parent=raw.get('parent'), abstract=raw.get('abstract', False),
                      line=getattr(raw, 'line', None))
    for ancestor in reversed(chain):
        _apply(image, by_name[ancestor][1])
    if image.connection_type == 'winrm' and \
            not any('connection-port' in by_name[a][1] for a in chain):
        image.connection_port = 5986   # released Nodepool's default for winrm
    return image
