"""``zuul-admin export-keys``, ``import-keys`` and ``delete-keys``: the
projects' secret keys in ZooKeeper (zuul.conf's ``[zookeeper]`` and
``[keystore] password``; zuul/zk/keys.py), for zuul/cmd/admin.py."""

from __future__ import annotations

import os
import sys


def key_command(args, config: str, out) -> int:
    """export-keys, import-keys, delete-keys: against the ZooKeeper of
    ``config``."""
    from kazoo.exceptions import KazooException

    from zuul.configloader.zuulconf import ZuulConfError, load_zuul_conf
    from zuul.zk import keys
    err = f'zuul-admin {args.command}'
    try:
        conf = load_zuul_conf(config)
        records = keys.read_export(args.path) if args.command == 'import-keys' else None
    except (ZuulConfError, OSError) as e:
        print(f'{err}: {_os_error(e)}', file=sys.stderr)
        return 2
    except keys.KeyStoreError as e:
        print(f'{err}: {e}', file=sys.stderr)
        return 1
    client = _zookeeper(conf, err)
    if client is None:
        return 1
    try:
        return _run_key_command(args, conf, client, records, err, out)
    except keys.KeyStoreError as e:
        print(f'{err}: {e}', file=sys.stderr)
        return 1
    except OSError as e:
        print(f'{err}: {_os_error(e)}', file=sys.stderr)
        return 2
    except KazooException as e:
        print(f'{err}: ZooKeeper at {conf.zookeeper.hosts}: {type(e).__name__} {e}',
              file=sys.stderr)
        return 1
    finally:
        client.stop()
        client.close()


def _os_error(e) -> str:
    if isinstance(e, OSError) and e.filename:
        return f'{e.filename}: {e.strerror}'
    return str(e)


def _zookeeper(conf, err):
    """A started client for ``[zookeeper]``, or None (the error printed)."""
    from nodepool.zk.api import connect
    zk = conf.zookeeper
    try:
        return connect(zk.hosts, timeout=zk.session_timeout, tls=zk.tls(),
                       start_timeout=zk.session_timeout)
    except Exception as e:
        timed_out = 'time' in type(e).__name__.lower()
        why = f'no answer within {zk.session_timeout:g}s' if timed_out else \
            f'{type(e).__name__} {e}'
        print(f'{err}: cannot reach ZooKeeper at {zk.hosts} ([zookeeper] hosts of '
              f'{conf.path}): {why}', file=sys.stderr)
        return None


def _run_key_command(args, conf, client, records, err, out) -> int:
    from zuul.zk import keys
    if args.command == 'export-keys':
        count = keys.export_keys(client, args.path)
        print(f'exported the keys of {count} project(s) to {args.path}', file=out)
        return 0
    if args.command == 'import-keys':
        result = keys.import_keys(client, records, conf.keystore.password, force=args.force)
        print(f'imported the keys of {len(result.imported)} project(s), replaced '
              f'{len(result.replaced)}, {len(result.unchanged)} already present', file=out)
        for name in result.replaced:
            print(f'replaced the key of {name}', file=out)
        return 0
    if not keys.delete_keys(client, args.connection, args.project):
        print(f'{err}: no keys stored for project {args.project} (connection '
              f'{args.connection})', file=sys.stderr)
        return 1
    print(f'deleted the keys of project {args.project} (connection {args.connection})',
          file=out)
    from zuul.lib.keystore import KeyStore
    try:
        legacy = KeyStore(conf.scheduler.state_dir).path(args.connection, args.project)
    except ValueError:
        return 0
    if os.path.exists(legacy):
        print(f'warning: {legacy} (the key file of an earlier release) is still there: a '
              'scheduler imports it again on next use; remove it too', file=out)
    return 0
