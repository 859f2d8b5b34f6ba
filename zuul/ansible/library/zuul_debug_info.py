"""zuul_debug_info: what a node looks like, for the build's logs.

Runs on the node (zuul-jobs' ``validate-host`` role writes its result
into ``zuul-info/zuul-info.<host>.txt``).  As released Zuul's module, it
takes ``image_manifest`` (a file whose content is returned as
``image_manifest``), ``image_manifest_files`` (files returned as
``image_manifest_files``: a list of ``filename``, ``underline`` and
``content``, missing ones left out) and ``traceroute_host`` (then
``traceroute_v4`` / ``traceroute_v6``); it always tries ``uname``,
``network_interfaces``, ``network_routing_v4``, ``network_routing_v6``
and ``network_neighbors``.  A key whose command is missing or fails is
left out of the result: a node without ``ip`` or ``traceroute`` is not a
failed build.
"""

from __future__ import annotations

COMMANDS = (
    ('uname', ['uname', '-a']),
    ('network_interfaces', ['ip', 'address', 'show']),
    ('network_routing_v4', ['ip', '-4', 'route', 'show']),
    ('network_routing_v6', ['ip', '-6', 'route', 'show']),
    ('network_neighbors', ['ip', 'neighbor', 'show']),
)


def _output(module, command):
    if module.get_bin_path(command[0]) is None:
        return None
    try:
        rc, out, _ = module.run_command(command)
    except Exception:    # noqa: BLE001 - a missing tool is only a missing key
        return None
    return out if rc == 0 else None


def _read(path):
    try:
        with open(path, errors='replace') as f:
            return f.read()
    except OSError:
        return None


def debug_info(module, params):
    result = {}
    for key, command in COMMANDS:
        out = _output(module, command)
        if out is not None:
            result[key] = out
    host = params.get('traceroute_host')
    if host:
        for key, command in (('traceroute_v4', ['traceroute', '-4', '-n', host]),
                             ('traceroute_v6', ['traceroute', '-6', '-n', host])):
            out = _output(module, command)
            if out is not None:
                result[key] = out
    manifest = params.get('image_manifest')
    if manifest:
        content = _read(manifest)
        if content is not None:
            result['image_manifest'] = content
    files = []
    for name in params.get('image_manifest_files') or []:
        content = _read(name)
        if content is not None:
            files.append({'filename': name, 'underline': '-' * len(name),
                          'content': content})
    result['image_manifest_files'] = files
    return result


def main():
    from ansible.module_utils.basic import AnsibleModule
    module = AnsibleModule(argument_spec={
        'image_manifest': {'type': 'str', 'required': False},
        'image_manifest_files': {'type': 'list', 'elements': 'str', 'required': False},
        'traceroute_host': {'type': 'str', 'required': False},
    })
    module.exit_json(changed=False, **debug_info(module, module.params))


if __name__ == '__main__':
    main()
