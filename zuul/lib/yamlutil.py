"""YAML loading for Zuul configuration.

Uses PyYAML's C parser (about 5x faster than the pure-Python one) with a
constructor that understands Zuul's tags and records where every mapping
starts, so errors can name a file and line.

Tags:
- ``!encrypted/pkcs1-oaep``: scalar or list of base64 chunks -> EncryptedPKCS1OAEP
- ``!inherit`` / ``!override``: wrap a value to say how it combines with the
  parent's value (-> Inherit / Override)
- ``!unsafe``: a string Ansible must not template -> UnsafeStr

Limits (configuration comes from untrusted projects): a document may nest
at most MAX_NESTING_DEPTH collections deep, aliases may add at most
MAX_ALIAS_EXPANSION nodes to it once expanded (a "billion laughs" file is
a few lines long and expands to billions), and an alias may not refer to
the collection that contains it. These are checked on the composed node
graph, before any Python object is built (YAMLLimitError).
"""

from __future__ import annotations

import yaml

# Collections nested deeper than this are refused (libyaml itself stops at
# 1000, deeper than Python code that walks the data can safely go).
MAX_NESTING_DEPTH = 100
# Nodes that aliases may add to a document, counting each alias as a copy
# of what it refers to.
MAX_ALIAS_EXPANSION = 100_000

try:
    _BaseLoader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - PyYAML without libyaml
    _BaseLoader = yaml.SafeLoader


class MarkedDict(dict):
    """A mapping that remembers where it was in its file (1-based lines)."""

    __slots__ = ('start_line', 'end_line', 'path')

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.start_line = None
        self.end_line = None
        self.path = None


class MarkedList(list):
    """A sequence that remembers where it and each of its items were."""

    __slots__ = ('start_line', 'end_line', 'path', 'item_lines')

    def __init__(self, *args):
        super().__init__(*args)
        self.start_line = None
        self.end_line = None
        self.path = None
        self.item_lines = ()


class EncryptedPKCS1OAEP:
    """A secret value encrypted with the project's public key, in chunks."""

    yaml_tag = '!encrypted/pkcs1-oaep'

    def __init__(self, ciphertext):
        if isinstance(ciphertext, (list, tuple)):
            self.ciphertext = [str(c).strip() for c in ciphertext]
        else:
            self.ciphertext = [str(ciphertext).strip()]

    def __eq__(self, other):
        return isinstance(other, EncryptedPKCS1OAEP) and \
            self.ciphertext == other.ciphertext

    def __hash__(self):
        return hash(tuple(self.ciphertext))

    def __repr__(self):
        return f'<EncryptedPKCS1OAEP {len(self.ciphertext)} chunk(s)>'


class _Wrapped:
    tag = ''

    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return type(self) is type(other) and self.value == other.value

    def __hash__(self):
        return hash((type(self).__name__, repr(self.value)))

    def __repr__(self):
        return f'{type(self).__name__}({self.value!r})'


class Inherit(_Wrapped):
    """``!inherit``: combine with the inherited value."""

    tag = '!inherit'


class Override(_Wrapped):
    """``!override``: replace the inherited value."""

    tag = '!override'


class UnsafeStr(str):
    """``!unsafe``: passed to Ansible as an unsafe (never templated) string."""

    tag = '!unsafe'


# How an unsafe string travels in JSON (the executor's wire format): a
# one-key mapping, turned back into UnsafeStr before Ansible sees it.
UNSAFE_MARKER = '__ansible_unsafe__'


def to_wire(value):
    """JSON-safe copy of ``value`` with UnsafeStr as ``{UNSAFE_MARKER: s}``."""
    if isinstance(value, UnsafeStr):
        return {UNSAFE_MARKER: str(value)}
    if isinstance(value, dict):
        return {k: to_wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_wire(v) for v in value]
    return value


def from_wire(value):
    """The inverse of to_wire."""
    if isinstance(value, dict):
        if len(value) == 1 and UNSAFE_MARKER in value and \
                isinstance(value[UNSAFE_MARKER], str):
            return UnsafeStr(value[UNSAFE_MARKER])
        return {k: from_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    return value


# How Ansible's own JSON decoder takes an unsafe string (any ansible-core
# version).  Vars files are written as JSON with it rather than as YAML
# with ``!unsafe``: ansible-core 2.19 resolves the scalar under that tag,
# so ``!unsafe '1'`` became the integer 1 and ``!unsafe 'yes'`` a boolean.
ANSIBLE_UNSAFE_KEY = '__ansible_unsafe'


def to_ansible(value):
    """``value`` (UnsafeStr or wire form) as Ansible's JSON decoder wants
    it: every unsafe string a ``{"__ansible_unsafe": text}`` object."""
    value = from_wire(value)
    return _to_ansible(value)


def _to_ansible(value):
    if isinstance(value, UnsafeStr):
        return {ANSIBLE_UNSAFE_KEY: str(value)}
    if isinstance(value, _Wrapped):
        return _to_ansible(value.value)
    if isinstance(value, dict):
        return {str(k): _to_ansible(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_ansible(v) for v in value]
    return value


def dump_for_ansible(value) -> str:
    """A vars file (or inventory) Ansible reads with ``-e @file`` / ``-i``:
    JSON, unsafe strings marked the way Ansible decodes them."""
    import json
    return json.dumps(to_ansible(value), indent=1, sort_keys=True, default=str)


def mark_unsafe(value):
    """``value`` with every string in it (not the mapping keys) an
    UnsafeStr: text Ansible never templates.  ``!inherit``/``!override``
    wrappers and the line marks of mappings and lists are kept."""
    if isinstance(value, str):
        return value if isinstance(value, UnsafeStr) else UnsafeStr(value)
    if isinstance(value, _Wrapped):
        return type(value)(mark_unsafe(value.value))
    if isinstance(value, dict):
        out = {k: mark_unsafe(v) for k, v in value.items()}
        if isinstance(value, MarkedDict):
            out = _copy_marks(value, MarkedDict(out))
        return out
    if isinstance(value, (list, tuple)):
        out = [mark_unsafe(v) for v in value]
        if isinstance(value, MarkedList):
            marked = _copy_marks(value, MarkedList(out))
            marked.item_lines = value.item_lines
            return marked
        return out if isinstance(value, list) else tuple(out)
    return value


def _copy_marks(source, target):
    target.start_line, target.end_line, target.path = (
        source.start_line, source.end_line, source.path)
    return target


def unwrap(value):
    """Return the plain value of an Inherit/Override wrapper."""
    if isinstance(value, _Wrapped):
        return value.value
    return value


class ZuulLoader(_BaseLoader):
    """SafeLoader (C parser) + Zuul tags + line marks on mappings."""

    def __init__(self, stream, path=None):
        super().__init__(stream)
        self.zuul_path = path


def _construct_marked_mapping(loader, node):
    data = MarkedDict()
    data.start_line = node.start_mark.line + 1
    data.end_line = node.end_mark.line + 1
    data.path = loader.zuul_path
    yield data
    data.update(yaml.constructor.SafeConstructor.construct_mapping(loader, node))


def _construct_marked_seq(loader, node):
    data = MarkedList()
    data.start_line = node.start_mark.line + 1
    data.end_line = node.end_mark.line + 1
    data.path = loader.zuul_path
    data.item_lines = tuple(n.start_mark.line + 1 for n in node.value)
    yield data
    data.extend(loader.construct_sequence(node))


def _construct_encrypted(loader, node):
    if isinstance(node, yaml.SequenceNode):
        return EncryptedPKCS1OAEP(loader.construct_sequence(node))
    return EncryptedPKCS1OAEP(loader.construct_scalar(node))


def _construct_any(loader, node):
    if isinstance(node, yaml.SequenceNode):
        return list(loader.construct_sequence(node, deep=True))
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    return loader.construct_scalar(node)


def _construct_inherit(loader, node):
    return Inherit(_construct_any(loader, node))


def _construct_override(loader, node):
    return Override(_construct_any(loader, node))


def _construct_unsafe(loader, node):
    return UnsafeStr(loader.construct_scalar(node))


ZuulLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_marked_mapping)
ZuulLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_marked_seq)
ZuulLoader.add_constructor('!encrypted/pkcs1-oaep', _construct_encrypted)
ZuulLoader.add_constructor('!inherit', _construct_inherit)
ZuulLoader.add_constructor('!override', _construct_override)
ZuulLoader.add_constructor('!unsafe', _construct_unsafe)


class YAMLSyntaxError(Exception):
    """A file that is not valid YAML; carries the path and line."""

    def __init__(self, path, line, reason):
        super().__init__(f'{path}:{line}: {reason}')
        self.path = path
        self.line = line
        self.reason = reason


class YAMLLimitError(YAMLSyntaxError):
    """Valid YAML that exceeds a limit (nesting, alias expansion)."""


def _children(node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_node_limits(root, path=None) -> None:
    """Raise YAMLLimitError if the node graph under ``root`` nests too
    deep, expands too much through aliases or is recursive.

    Walks collections only (scalars count as one node each), iteratively,
    so neither the walk nor a recursive alias can exhaust the stack."""
    if isinstance(root, yaml.ScalarNode):
        return
    done: dict[int, tuple[int, int]] = {}   # id -> (depth, expanded size)
    unique = 0
    active: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            depth, size, scalars = 1, 1, 0
            for child in _children(node):
                if isinstance(child, yaml.ScalarNode):
                    scalars += 1
                else:
                    d, n = done[id(child)]
                    depth, size = max(depth, d + 1), size + n
            done[key] = (depth, size + scalars)
            active.discard(key)
            unique += 1 + scalars
            # The unique nodes counted so far include all of this
            # subtree's: this never over-counts, and at the root is exact.
            _check_node(node, path, depth, size + scalars - unique)
            continue
        if key in done:
            continue
        if key in active:
            raise YAMLLimitError(path, node.start_mark.line + 1,
                                 'an alias refers to a collection that contains it')
        active.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node)
                     if not isinstance(c, yaml.ScalarNode) and id(c) not in done)


def _check_node(node, path, depth: int, expansion: int) -> None:
    line = node.start_mark.line + 1
    if depth > MAX_NESTING_DEPTH:
        raise YAMLLimitError(path, line, f'collections nested more than '
                             f'{MAX_NESTING_DEPTH} levels deep')
    if expansion > MAX_ALIAS_EXPANSION:
        raise YAMLLimitError(path, line, f'aliases expand the document by more than '
                             f'{MAX_ALIAS_EXPANSION} nodes')


def load(text: str, path: str | None = None):
    """Parse one YAML document with Zuul's tags and line marks (and the
    limits above)."""
    loader = ZuulLoader(text, path=path)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_node_limits(node, path)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        reason = ' '.join(x for x in (e.context, e.problem) if x)
        raise YAMLSyntaxError(path, line, reason or str(e)) from None
    except yaml.YAMLError as e:
        raise YAMLSyntaxError(path, None, str(e)) from None
    finally:
        loader.dispose()


def load_file(path: str):
    with open(path, encoding='utf-8') as f:
        return load(f.read(), path=str(path))


# --- dumping (for ansible vars, API output): keep the tags round-trippable

class ZuulDumper(yaml.SafeDumper):
    pass


def _represent_encrypted(dumper, data):
    if len(data.ciphertext) == 1:
        return dumper.represent_scalar(EncryptedPKCS1OAEP.yaml_tag, data.ciphertext[0])
    return dumper.represent_sequence(EncryptedPKCS1OAEP.yaml_tag, data.ciphertext)


def _represent_unsafe(dumper, data):
    return dumper.represent_scalar('!unsafe', str(data))


ZuulDumper.add_representer(MarkedDict, yaml.representer.SafeRepresenter.represent_dict)
ZuulDumper.add_representer(MarkedList, yaml.representer.SafeRepresenter.represent_list)
ZuulDumper.add_representer(EncryptedPKCS1OAEP, _represent_encrypted)
ZuulDumper.add_representer(UnsafeStr, _represent_unsafe)


def dump(data, **kw) -> str:
    kw.setdefault('default_flow_style', False)
    return yaml.dump(data, Dumper=ZuulDumper, **kw)
