"""nodepool: look at and act on nodes and requests.

    nodepool [-c nodepool.yaml] list [--detail] [--json]
    nodepool hold <id> [--reason TEXT]
    nodepool delete <id> [--now]
    nodepool request-list [--json]
    nodepool info <provider>
    nodepool label-list
    nodepool config-validate
    nodepool dib-image-list | image-list | image-build | dib-image-delete | image-delete
             | image-pause | image-unpause      (see nodepool.cmd.images)
"""

from __future__ import annotations

import argparse
import sys

from kazoo.handlers.threading import KazooTimeoutError

from nodepool.cmd import DEFAULT_CONFIG
from nodepool.cmd.output import age, print_json, render_table  # noqa: F401
from nodepool.config import WARNING, ConfigError, load_config, validate_config
from nodepool.driver import default_registry
from nodepool.launcher.state_machine import remove_node
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.records import DELETING, HOLD, READY, Node

# The fields of a node as released Nodepool's status listing names them
# (its web app's ``/node-list.json`` objects use these keys), with the
# column headers of the table.  The first nine are the plain table; the
# rest are added by ``--detail``.  JSON always carries every field.
NODE_FIELDS = [
    ('id', 'ID'), ('provider', 'Provider'), ('label', 'Label'), ('server_id', 'Server ID'),
    ('public_ipv4', 'Public IPv4'), ('ipv6', 'IPv6'), ('state', 'State'), ('age', 'Age'),
    ('locked', 'Locked'),
    ('pool', 'Pool'), ('hostname', 'Hostname'), ('private_ipv4', 'Private IPv4'),
    ('AZ', 'AZ'), ('connection_port', 'Port'), ('launcher', 'Launcher'),
    ('allocated_to', 'Allocated To'), ('hold_job', 'Hold Job'), ('comment', 'Comment'),
]
BRIEF_FIELDS = 9
NODE_COLUMNS = [header for _, header in NODE_FIELDS[:BRIEF_FIELDS]]
DETAIL_COLUMNS = [header for _, header in NODE_FIELDS[BRIEF_FIELDS:]]

# Released Nodepool's request listing keys (``/request-list.json``).
REQUEST_FIELDS = [
    ('id', 'Request ID'), ('state', 'State'), ('requestor', 'Requestor'),
    ('node_types', 'Node Types'), ('nodes', 'Nodes'), ('declined_by', 'Declined By'),
]


def node_objects(zk: NodepoolZooKeeper, nodes: list[Node]) -> list[dict]:
    """One dict per node, keyed as in ``NODE_FIELDS``."""
    objs = []
    for n in nodes:
        values = [n.id, n.provider, n.type, n.external_id, n.public_ipv4, n.public_ipv6,
                  n.state, age(n.state_time),
                  'locked' if zk.is_node_locked(n.id) else 'unlocked',
                  n.pool, n.hostname, n.private_ipv4, n.az, n.connection_port, n.launcher,
                  n.allocated_to, n.hold_job, n.comment]
        objs.append(dict(zip([key for key, _ in NODE_FIELDS], values)))
    return objs


def node_rows(zk: NodepoolZooKeeper, nodes: list[Node], detail: bool) -> list[list]:
    fields = NODE_FIELDS if detail else NODE_FIELDS[:BRIEF_FIELDS]
    return [[obj[key] for key, _ in fields] for obj in node_objects(zk, nodes)]


# -- verbs -----------------------------------------------------------------------


def cmd_list(args, zk) -> int:
    if args.json:
        print_json(node_objects(zk, zk.get_nodes()))
        return 0
    headers = NODE_COLUMNS + (DETAIL_COLUMNS if args.detail else [])
    print(render_table(headers, node_rows(zk, zk.get_nodes(), args.detail)))
    return 0


def cmd_info(args, zk) -> int:
    if args.provider not in args.config_obj.providers:
        print(f'nodepool: no provider {args.provider!r} in {args.config}', file=sys.stderr)
        return 1
    nodes = [n for n in zk.get_nodes() if n.provider == args.provider]
    print(render_table(NODE_COLUMNS + DETAIL_COLUMNS, node_rows(zk, nodes, True)))
    return 0


LABEL_FIELDS = [('label', 'Label'), ('min_ready', 'Min Ready'), ('ready', 'Ready'),
                ('pools', 'Pools')]


def label_objects(config, nodes: list[Node]) -> list[dict]:
    """One dict per configured label: min-ready, ready unallocated nodes,
    the pools offering it."""
    objs = []
    for name, label in sorted(config.labels.items()):
        pools = sorted({f'{p.name}/{pool.name}' for p in config.providers.values()
                        for pool in p.pools.values() if name in pool.labels})
        ready = sum(1 for n in nodes if n.type == name and n.state == READY
                    and not n.allocated_to)
        objs.append({'label': name, 'min_ready': label.min_ready, 'ready': ready,
                     'pools': pools})
    return objs


def label_table(config, nodes: list[Node]) -> str:
    rows = [[o['label'], o['min_ready'], o['ready'], ', '.join(o['pools'])]
            for o in label_objects(config, nodes)]
    return render_table([h for _, h in LABEL_FIELDS], rows)


def request_objects(requests) -> list[dict]:
    return [{key: getattr(r, key) for key, _ in REQUEST_FIELDS} for r in requests]


def request_table(requests) -> str:
    rows = [[r.id, r.state, r.requestor, ','.join(r.node_types), ','.join(r.nodes),
             ','.join(r.declined_by), age(r.created_time)] for r in requests]
    return render_table(['Request ID', 'State', 'Requestor', 'Node Types', 'Nodes',
                         'Declined By', 'Age'], rows)


def cmd_label_list(args, zk) -> int:
    print(label_table(args.config_obj, zk.get_nodes()))
    return 0


def cmd_request_list(args, zk) -> int:
    if args.json:
        print_json(request_objects(zk.get_requests()))
        return 0
    print(request_table(zk.get_requests()))
    return 0


def _locked_node(zk, node_id: str) -> Node | None:
    stub = Node(id=node_id)
    if zk.get_node(node_id) is None:
        print(f'nodepool: node {node_id} not found', file=sys.stderr)
        return None
    if not zk.lock_node(stub, blocking=False, identifier='nodepool-cli'):
        print(f'nodepool: node {node_id} is locked (in use?)', file=sys.stderr)
        return None
    node = zk.get_node(node_id)
    if node is None:
        zk.unlock_node(stub)
        print(f'nodepool: node {node_id} not found', file=sys.stderr)
        return None
    node.lock = stub.lock
    return node


def cmd_hold(args, zk) -> int:
    node = _locked_node(zk, args.id)
    if node is None:
        return 1
    try:
        node.set_state(HOLD)
        node.comment = args.reason
        zk.store_node(node)
    finally:
        zk.unlock_node(node)
    print(render_table(NODE_COLUMNS, node_rows(zk, [node], False)))
    return 0


def cmd_delete(args, zk) -> int:
    node = _locked_node(zk, args.id)
    if node is None:
        return 1
    if args.now:
        provider = args.config_obj.providers.get(node.provider)
        if provider is None:
            zk.unlock_node(node)
            print(f'nodepool: provider {node.provider!r} of node {node.id} is not in '
                  f'{args.config}', file=sys.stderr)
            return 1
        adapter = default_registry().get(provider.driver).get_adapter(provider)
        adapter.start()
        if not remove_node(zk, adapter, node):
            print(f'nodepool: deleting node {node.id} failed; it stays deleting',
                  file=sys.stderr)
            return 1
        print(f'Node {node.id} deleted')
        return 0
    try:
        node.set_state(DELETING)
        zk.store_node(node)
    finally:
        zk.unlock_node(node)
    print(render_table(NODE_COLUMNS, node_rows(zk, [node], False)))
    return 0


def cmd_config_validate(args) -> int:
    issues = validate_config(args.config)
    for issue in issues:
        print(issue, file=sys.stderr)
    errors = [i for i in issues if i.severity != WARNING]
    if errors:
        print(f'{args.config}: {len(errors)} error(s)', file=sys.stderr)
        return 1
    print(f'{args.config}: configuration is valid')
    return 0


# -- wiring ----------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='nodepool', description='Nodepool command line client')
    p.add_argument('-c', dest='config', default=DEFAULT_CONFIG,
                   help=f'nodepool.yaml (default {DEFAULT_CONFIG})')
    sub = p.add_subparsers(dest='verb', required=True)
    s = sub.add_parser('list', help='list nodes')
    s.add_argument('--detail', action='store_true', help='more columns')
    s.add_argument('--json', action='store_true',
                   help='every field of every node as a JSON list of objects')
    s.set_defaults(func=cmd_list)
    s = sub.add_parser('hold', help='hold a node (never given out, never deleted)')
    s.add_argument('id')
    s.add_argument('--reason', default=None)
    s.set_defaults(func=cmd_hold)
    s = sub.add_parser('delete', help='delete a node')
    s.add_argument('id')
    s.add_argument('--now', action='store_true', help='delete here and now')
    s.set_defaults(func=cmd_delete)
    s = sub.add_parser('request-list', help='list node requests')
    s.add_argument('--json', action='store_true', help='a JSON list of objects')
    s.set_defaults(func=cmd_request_list)
    s = sub.add_parser('info', help="a provider's nodes in detail")
    s.add_argument('provider')
    s.set_defaults(func=cmd_info)
    s = sub.add_parser('label-list', help='labels, min-ready and ready nodes')
    s.set_defaults(func=cmd_label_list)
    s = sub.add_parser('config-validate', help='check nodepool.yaml')
    s.set_defaults(func=None)
    from nodepool.cmd.images import add_image_commands
    add_image_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.verb == 'config-validate':
        return cmd_config_validate(args)
    try:
        args.config_obj = load_config(args.config)
    except ConfigError as e:
        print(f'nodepool: invalid configuration:\n{e}', file=sys.stderr)
        return 1
    if not args.config_obj.zookeeper_servers:
        print(f'nodepool: {args.config} has no zookeeper-servers', file=sys.stderr)
        return 1
    cfg = args.config_obj
    try:
        zk = NodepoolZooKeeper.from_hosts(cfg.zookeeper_hosts(), timeout=cfg.zookeeper_timeout,
                                          tls=cfg.zookeeper_tls)
    except KazooTimeoutError:
        print(f'nodepool: cannot connect to ZooKeeper at {cfg.zookeeper_hosts()}',
              file=sys.stderr)
        return 1
    try:
        return args.func(args, zk)
    finally:
        zk.close()


if __name__ == '__main__':
    sys.exit(main())
