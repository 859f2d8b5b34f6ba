"""zuul-launcher beside Nodepool, end to end (seed 001, "Upgrade
Process"): the dev Gerrit, a real ZooKeeper, Gearman, merger, executor
and scheduler, a nodepool-launcher serving netns nodes, and a real
``zuul-launcher`` process serving netns nodes from the ``label``,
``section`` and ``provider`` objects of the tenant's config project.

- A job whose label is defined by a ``label`` object runs on a node
  zuul-launcher booted; a job using a label Nodepool serves keeps working
  in the same change; a nodeset mixing both is served by both.
- Moving a label from Nodepool to zuul-launcher while changes wait for
  and run on its nodes loses nothing: requests already sent stay with
  Nodepool, later ones go to zuul-launcher, every change is reported.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import pathlib
import subprocess
import textwrap

import pytest

from nodepool.config import load_config_text
from nodepool.driver.netns.host import NetnsHostManager, available
from nodepool.launcher.launcher import Launcher
from nodepool.launcher.settings import LauncherSettings
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.paths import ZUUL_LAUNCHER
from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for
from zuul.scheduler.nodes import NODEPOOL
from zuul.scheduler.nodes import ZUUL_LAUNCHER as LAUNCHER_SYSTEM
from zuul.zk import launcher_config

needs_netns = pytest.mark.skipif(available() is not None,
                                 reason=f'netns nodes unavailable: {available()}')
needs_launcher = pytest.mark.skipif(importlib.util.find_spec('zuul.cmd.launcher') is None,
                                    reason='zuul-launcher (zuul.cmd.launcher) is not there')

# Nodepool's netns provider and zuul-launcher's use their own bridges,
# subnets and provider names per test process: node namespaces are
# named after the provider and the node id (ids restart in every
# ZooKeeper chroot), and bridges, subnets, namespaces and veths (named
# after the bridge's first 8 characters) are global.
_PID = os.getpid()
NP_BRIDGE, NP_SUBNET = f'zn{_PID % 1000000}', f'172.{16 + _PID // 256 % 8}.{_PID % 256}.0/24'
ZL_BRIDGE, ZL_SUBNET = f'zl{_PID % 1000000}', f'172.{24 + _PID // 256 % 8}.{_PID % 256}.0/24'
NP_PROVIDER, ZL_PROVIDER = f'np{_PID}', f'zl{_PID}'

NODE_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Every node answers over SSH
      command: "true"
    - name: The job sees the label as it wrote it
      assert:
        that: "nodepool.label in ['zl-node', 'ubuntu-jammy', 'moving']"
"""

# Trusted (config-project) playbook: holds its node until the test says so.
WAIT_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - command: "true"
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Run until the test says so
      wait_for:
        path: {marker}
        timeout: 300
"""

JOBS = """
- job:
    name: on-zuul-launcher
    nodeset:
      nodes:
        - name: node
          label: zl-node
    run: playbooks/nodes.yaml
- job:
    name: on-nodepool
    nodeset:
      nodes:
        - name: node
          label: ubuntu-jammy
    run: playbooks/nodes.yaml
- job:
    name: on-both
    nodeset:
      nodes:
        - name: new
          label: zl-node
        - name: old
          label: ubuntu-jammy
    run: playbooks/nodes.yaml
- job:
    name: waits
    nodeset:
      nodes:
        - name: node
          label: moving
    run: playbooks/waits.yaml
"""


# Config changes to project-config go through the gate (no nodes needed).
CONFIG_GATE = """
- project:
    name: org/project-config
    gate:
      jobs:
        - noop-ok
"""


def node_objects(*labels: str) -> str:
    """The seed 001 objects that make zuul-launcher serve ``labels`` from
    the ``netns`` connection."""
    text = textwrap.dedent("""
        - image:
            name: host-root
            type: cloud
            username: root
            python-path: /usr/bin/python3
        - flavor:
            name: normal
        - section:
            name: local
            connection: netns
            quota:
              instances: 6
            images:
              - name: host-root
            flavors:
              - name: normal
        """)
    for label in labels:
        text += textwrap.dedent(f"""
            - label:
                name: {label}
                image: host-root
                flavor: normal
            """)
    text += textwrap.dedent(f"""
        - provider:
            name: {ZL_PROVIDER}
            section: local
            labels:
        """)
    for label in labels:
        text += f'      - name: {label}\n'
    return text


APP = """
- project:
    check:
      jobs:
        - on-zuul-launcher
        - on-nodepool
        - on-both
"""

WAITS_APP = """
- project:
    check:
      jobs:
        - waits
"""


@pytest.fixture
def nodepool_launcher(zk_chroot, ssh_keypair, tmp_path):
    """nodepool-launcher (in this process) serving ``ubuntu-jammy`` and
    ``moving`` from a netns provider with room for two nodes."""
    state = str(tmp_path / 'np-netns')
    config = load_config_text(textwrap.dedent(f"""
        labels:
          - name: ubuntu-jammy
          - name: moving
        providers:
          - name: {NP_PROVIDER}
            driver: netns
            bridge: {NP_BRIDGE}
            subnet: {NP_SUBNET}
            state-dir: {state}
            authorized-keys: ['{ssh_keypair.public_key.strip()}']
            pools:
              - name: main
                max-servers: 2
                labels:
                  - name: ubuntu-jammy
                    username: root
                    python-path: /usr/bin/python3
                  - name: moving
                    username: root
                    python-path: /usr/bin/python3
        """))
    zk = NodepoolZooKeeper.from_hosts(zk_chroot.hosts)
    launcher = Launcher(config, zk, LauncherSettings(
        hostname='nodepool-launcher.test', cleanup_interval=1.0, poll_interval=0.5,
        min_ready_interval=1.0))
    launcher.start()
    try:
        yield zk
    finally:
        launcher.stop()
        zk.close()
        NetnsHostManager(state, NP_SUBNET, NP_BRIDGE).cleanup_all(f'{NP_PROVIDER}-')
        subprocess.run(['ip', 'link', 'del', NP_BRIDGE], capture_output=True)


@pytest.fixture
def system(zuul_system, ssh_keypair, tmp_path):  # noqa: F811
    """The Zuul system with a ``netns`` provider connection for
    zuul-launcher (not started yet)."""
    state = str(tmp_path / 'zl-netns')
    zuul_system.add_provider_connection(
        'netns', 'netns', bridge=ZL_BRIDGE, subnet=ZL_SUBNET, **{
            'state-dir': state,
            'authorized-keys-file': ssh_keypair.private_key_path + '.pub'})
    try:
        yield zuul_system
    finally:
        zuul_system.stop_zuul_launchers()
        manager = NetnsHostManager(state, ZL_SUBNET, ZL_BRIDGE)
        # Only the nodes this test's zuul-launcher made (their state dirs).
        for name in manager.list():
            if os.path.isdir(os.path.join(state, name)):
                manager.delete(name)
        subprocess.run(['ip', 'link', 'del', ZL_BRIDGE], capture_output=True)


def diagnosis(system) -> str:
    """What both node systems hold, and the end of zuul-launcher's log."""
    zk = system.service.zk
    lines = []
    for tree in (zk, zk.sibling(ZUUL_LAUNCHER)):
        root = tree.tree.request_root
        lines.append(f'{root}: ' + ', '.join(f'{r.id} {r.node_types} {r.state}'
                                              for r in tree.get_requests()))
        lines.append(f'{tree.tree.node_root}: ' + ', '.join(
            f'{n.id} {n.type} {n.state}' for n in tree.get_nodes()))
    lines.append('builds: ' + ', '.join(
        f'{b.build_set.item.change.number} {b.job.name} {b.result} {b.error_detail or ""}'
        for b in system.builds))
    return '\n'.join(lines) + '\n--- zuul-launcher log ---\n' + system.launcher_log()[-4000:]


def wait(system, predicate, timeout: float, what: str) -> None:
    """wait_for, failing with the state of both node systems."""
    try:
        wait_for(predicate, timeout=timeout, what=what)
    except TimeoutError:
        raise AssertionError(f'timed out waiting for {what}\n{diagnosis(system)}') from None


def subnet_of(node) -> str | None:
    address = ipaddress.ip_address(node.interface_ip)
    return next((net for net in (NP_SUBNET, ZL_SUBNET)
                 if address in ipaddress.ip_network(net)), None)


def record_routes(system):
    """Observe (not replace) the scheduler's node requests: per request,
    the change, the job and the node systems it went to; and the node
    records handed to each build."""
    routes: list[dict] = []
    adapter = system.scheduler.nodes
    real = adapter.request

    def request(item, job, pipeline):
        routed = real(item, job, pipeline)
        routes.append({'change': getattr(item.change, 'number', None), 'job': job.name,
                       'systems': routed.systems(), 'routed': routed})
        return routed
    adapter.request = request
    return routes


@needs_netns
@needs_launcher
def test_zuul_launcher_and_nodepool_labels_side_by_side(system, nodepool_launcher):
    system.create_projects(app_config=APP)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/jobs.yaml': textwrap.dedent(JOBS),
        'zuul.d/nodes.yaml': node_objects('zl-node'),
        'playbooks/nodes.yaml': textwrap.dedent(NODE_PLAYBOOK),
        'playbooks/waits.yaml': textwrap.dedent(WAIT_PLAYBOOK.format(marker='/nonexistent'))},
        'Jobs and node objects')
    system.start()
    zk = system.service.zk
    published = launcher_config.read_all(zk.client)
    (provider,) = published.values()
    assert provider.name == ZL_PROVIDER and provider.tenants == ['example']
    system.start_zuul_launcher()
    routes = record_routes(system)
    change = system.store.create_change('org/app', 'master', 'Try both systems',
                                        {'x.txt': '1\n'})
    wait(system, lambda: system.verified(change) != 0, timeout=200, what='check vote')
    message = system.messages(change)[-1]
    assert system.verified(change) == 1, message + system.launcher_log()[-3000:]
    for job in ('on-zuul-launcher', 'on-nodepool', 'on-both'):
        assert f'{job} ' in message and 'SUCCESS' in message
    by_job = {r['job']: r for r in routes}
    assert by_job['on-zuul-launcher']['systems'] == [LAUNCHER_SYSTEM]
    assert by_job['on-nodepool']['systems'] == [NODEPOOL]
    assert by_job['on-both']['systems'] == [NODEPOOL, LAUNCHER_SYSTEM]
    # The zuul-launcher request carried the canonical label name, and its
    # node was a zuul-launcher node record.
    routed = by_job['on-zuul-launcher']['routed']
    (part,) = routed.parts
    (node_type,) = part.handle.request.node_types
    assert node_type.endswith('/org/project-config/zl-node'), node_type
    assert part.client.zk.tree == ZUUL_LAUNCHER
    # Each node came from the system it was asked of (the providers'
    # subnets tell them apart).
    assert [subnet_of(n) for n in by_job['on-zuul-launcher']['routed'].nodes] == [ZL_SUBNET]
    assert [subnet_of(n) for n in by_job['on-nodepool']['routed'].nodes] == [NP_SUBNET]
    assert [subnet_of(n) for n in by_job['on-both']['routed'].nodes] == [ZL_SUBNET, NP_SUBNET]
    # Nodes of both systems were returned (used, then deleted).
    launcher_zk = zk.sibling(ZUUL_LAUNCHER)
    wait(system, lambda: not [n for n in launcher_zk.get_nodes() + nodepool_launcher.get_nodes()
                          if n.state in ('in-use', 'used')],
             timeout=60, what='nodes returned and cleaned up')


@needs_netns
@needs_launcher
def test_moving_a_label_mid_run_loses_no_request(system, nodepool_launcher, tmp_path):
    marker = pathlib.Path(system.root) / 'release'   # trusted plays see only the system's root
    system.create_projects(app_config=WAITS_APP)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/jobs.yaml': textwrap.dedent(JOBS),
        'zuul.d/nodes.yaml': node_objects('zl-node'),
        'playbooks/nodes.yaml': textwrap.dedent(NODE_PLAYBOOK),
        'playbooks/waits.yaml': textwrap.dedent(WAIT_PLAYBOOK.format(marker=marker)),
        'zuul.d/gate-config.yaml': textwrap.dedent(CONFIG_GATE)},
        'Jobs; moving is still served by Nodepool')
    system.start()
    system.start_zuul_launcher()
    routes = record_routes(system)
    store = system.store
    early = [store.create_change('org/app', 'master', f'Early {i}', {f'e{i}.txt': '1\n'})
             for i in range(3)]
    # Two run on Nodepool's two nodes; the third waits in /nodepool/requests.
    running = system.executor.builds
    wait(system, lambda: len(running) == 2 and len(nodepool_launcher.get_request_ids()) == 1,
             timeout=180, what='two builds running and one request queued at Nodepool')
    # Move "moving" to zuul-launcher: a config change gated and merged.
    move = store.create_change('org/project-config', 'master', 'Move moving', {
        'zuul.d/nodes.yaml': node_objects('zl-node', 'moving')})
    layout = lambda: system.scheduler.tenants['example'].layout  # noqa: E731
    assert 'moving' not in getattr(layout(), 'labels', {})    # proposed only
    store.approve(move, 'Workflow', 1, who='core')
    wait(system, lambda: store.get_change(move.number).status == 'MERGED', timeout=180,
         what='the config change to merge')
    wait(system, lambda: 'moving' in getattr(layout(), 'labels', {}), timeout=120,
         what='reconfiguration with the moved label')
    # Still queued at Nodepool (a reconfiguration moves no request).
    assert len(nodepool_launcher.get_request_ids()) == 1
    late = [store.create_change('org/app', 'master', f'Late {i}', {f'l{i}.txt': '1\n'})
            for i in range(2)]
    wait(system, lambda: len({r['change'] for r in routes} & {c.number for c in late}) == 2,
             timeout=180, what='the late changes to request nodes')
    marker.write_text('go\n')
    for change in early + late:
        wait(system, lambda change=change: system.verified(change) != 0, timeout=200,
                 what=f'a report on change {change.number}')
    system.settle()
    for change in early + late:
        message = system.messages(change)[-1]
        assert system.verified(change) == 1, message + diagnosis(system)
        assert 'waits' in message and 'SUCCESS' in message
    # The first request of each change went where the label was served
    # when it was made; a build retried after the move (a node lost under
    # load) asks zuul-launcher, which is right too.
    first: dict = {}
    for r in routes:
        first.setdefault(r['change'], r)
    assert [first[c.number]['systems'] for c in early] == [[NODEPOOL]] * 3
    assert [first[c.number]['systems'] for c in late] == [[LAUNCHER_SYSTEM]] * 2
    moved_at = routes.index(first[late[0].number])
    history = [(r['change'], r['systems']) for r in routes] + [
        (b.build_set.item.change.number, b.job.name, b.result) for b in system.builds]
    assert all(r['systems'] == [LAUNCHER_SYSTEM] for r in routes[moved_at:]), history
    subnets = {n: [subnet_of(node) for node in r['routed'].nodes] for n, r in first.items()}
    assert [subnets[c.number] for c in early] == [[NP_SUBNET]] * 3
    assert [subnets[c.number] for c in late] == [[ZL_SUBNET]] * 2
    assert nodepool_launcher.get_request_ids() == []
    assert system.service.zk.sibling(ZUUL_LAUNCHER).get_request_ids() == []


ORPHAN_APP = """
- job:
    name: half-unserved
    nodeset:
      nodes:
        - name: new
          label: orphan
        - name: old
          label: ubuntu-jammy
    run: playbooks/nodes.yaml
- project:
    check:
      jobs:
        - half-unserved
"""


@needs_netns
@needs_launcher
def test_mixed_nodeset_whose_new_half_fails(system, nodepool_launcher):
    """A label object no provider lists: zuul-launcher fails its half,
    the Nodepool half is withdrawn or its node returned, and the report
    says which half failed."""
    system.create_projects(app_config=ORPHAN_APP)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/nodes.yaml': node_objects('zl-node') + textwrap.dedent("""
            - label:
                name: orphan
                image: host-root
                flavor: normal
            """)}, 'A label no provider lists')
    system.store.push_branch('org/app', 'master', {
        'playbooks/nodes.yaml': textwrap.dedent(NODE_PLAYBOOK)})
    system.start()
    system.start_zuul_launcher()
    routes = record_routes(system)
    change = system.store.create_change('org/app', 'master', 'Half unserved', {'a': '1\n'})
    wait(system, lambda: system.verified(change) != 0, timeout=200, what='report')
    message = system.messages(change)[-1]
    assert system.verified(change) == -1, message
    assert 'half-unserved : NODE_FAILURE' in message, message
    assert '(zuul-launcher could not provide the nodes)' in message, message
    assert [r['systems'] for r in routes] == [[NODEPOOL, LAUNCHER_SYSTEM]]
    wait(system, lambda: not nodepool_launcher.get_request_ids() and not [
        n for n in nodepool_launcher.get_nodes()
        if n.state == 'in-use' or nodepool_launcher.is_node_locked(n.id)],
        timeout=60, what='the Nodepool half withdrawn and its node free')


HOLD_APP = """
- job:
    name: zl-fails
    nodeset:
      nodes:
        - name: node
          label: zl-node
    run: playbooks/fails.yaml
- project:
    check:
      jobs:
        - zl-fails
"""


@needs_netns
@needs_launcher
def test_autohold_and_dequeue_with_zuul_launcher_nodes(system, tmp_path):
    """The scheduler's other node operations on zuul-launcher's tree: an
    autohold keeps a failed build's node (``hold`` in /zuul/nodes); a
    dequeued change's running build gives its node back."""
    from zuul.lib import rpc_protocol as p
    from zuul.lib.rpc import RPCClient
    marker = pathlib.Path(system.root) / 'release'   # trusted plays see only the system's root
    system.create_projects(app_config=HOLD_APP)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/jobs.yaml': textwrap.dedent(JOBS),
        'zuul.d/nodes.yaml': node_objects('zl-node', 'moving'),
        'playbooks/waits.yaml': textwrap.dedent(WAIT_PLAYBOOK.format(marker=marker))},
        'Jobs and node objects')
    system.store.push_branch('org/app', 'master', {
        'playbooks/fails.yaml': '- hosts: all\n  gather_facts: false\n  tasks:\n'
                                '    - command: "false"\n'})
    system.start()
    system.start_zuul_launcher()
    zk = system.service.zk.sibling(ZUUL_LAUNCHER)
    client = RPCClient('127.0.0.1', system.conf.gearman.port, timeout=120)
    try:
        client.call(p.AUTOHOLD, p.RPCRequest(
            tenant='example', project='org/app', job='zl-fails', reason='look at it',
            count=1, node_hold_expiration=3600))
        change = system.store.create_change('org/app', 'master', 'Fails', {'a': '1\n'})
        wait(system, lambda: system.verified(change) == -1, timeout=200, what='failure')
        wait(system, lambda: [n for n in zk.get_nodes() if n.state == 'hold'], timeout=60,
                 what='held zuul-launcher node')
        (held,) = [n for n in zk.get_nodes() if n.state == 'hold']
        assert held.hold_job == 'zl-fails' and 'look at it' in held.comment
        assert not zk.is_node_locked(held.id)
        assert subnet_of(held) == ZL_SUBNET
    finally:
        client.shutdown()
    # A build holding a zuul-launcher node is dequeued: the node comes back.
    system.store.push_branch('org/app', 'master', {'.zuul.yaml': textwrap.dedent(WAITS_APP)},
                             'Wait instead')
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/nodes.yaml': node_objects('zl-node', 'moving') + '# again\n'}, 'Touch')
    wait(system, lambda: 'moving' in system.scheduler.tenants['example'].layout.labels,
             timeout=120, what='layout with moving')
    waiting = system.store.create_change('org/app', 'master', 'Waits', {'b': '1\n'})
    wait(system, lambda: any(b.job.name == 'waits' and b.uuid in system.executor.builds
                         for b in system.builds), timeout=180, what='the waits build running')
    (build,) = [b for b in system.builds if b.job.name == 'waits']
    (node_id,) = build.build_set.nodesets['waits'].node_ids
    assert zk.get_node(node_id).state == 'in-use'
    system.scheduler.management('dequeue', tenant='example', pipeline='check',
                                project='org/app', change=f'{waiting.number},1')
    wait(system, lambda: zk.get_node(node_id) is None or
             zk.get_node(node_id).state not in ('in-use',), timeout=60,
             what='the dequeued build\'s node returned')
    assert [n.id for n in zk.get_nodes() if n.state == 'hold'] == [held.id]
    marker.write_text('go\n')


ONLY_ZL_APP = """
- project:
    check:
      jobs:
        - on-zuul-launcher
"""

UNKNOWN_LABEL_APP = """
- job:
    name: on-unknown
    nodeset:
      nodes:
        - name: node
          label: ubuntu-jammy
    run: playbooks/nodes.yaml
- project:
    check:
      jobs:
        - on-zuul-launcher
        - on-unknown
"""


@needs_netns
@needs_launcher
def test_tenant_without_nodepool(system):
    """``use-nodepool: false``: jobs run on zuul-launcher nodes, a
    proposed nodeset with a label no ``label`` object defines is a config
    error on that change, and nothing is ever asked of Nodepool."""
    main = os.path.join(system.root, 'main.yaml')
    with open(main) as f:
        text = f.read()
    with open(main, 'w') as f:
        f.write(text.replace('    name: example\n',
                             '    name: example\n    use-nodepool: false\n', 1))
    system.create_projects(app_config=ONLY_ZL_APP)
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/jobs.yaml': textwrap.dedent(JOBS),
        'zuul.d/nodes.yaml': node_objects('zl-node', 'moving'),
        'playbooks/nodes.yaml': textwrap.dedent(NODE_PLAYBOOK),
        'playbooks/waits.yaml': textwrap.dedent(WAIT_PLAYBOOK.format(marker='/nonexistent'))},
        'Jobs and node objects')
    system.store.push_branch('org/app', 'master', {
        'playbooks/nodes.yaml': textwrap.dedent(NODE_PLAYBOOK)})
    system.start()
    assert system.scheduler.tenants['example'].layout.tenant.use_nodepool is False
    system.start_zuul_launcher()
    routes = record_routes(system)
    good = system.store.create_change('org/app', 'master', 'Fine', {'a': '1\n'})
    wait(system, lambda: system.verified(good) != 0, timeout=200, what='check vote')
    assert system.verified(good) == 1, system.messages(good)[-1]
    bad = system.store.create_change('org/app', 'master', 'Unknown label', {
        '.zuul.yaml': textwrap.dedent(UNKNOWN_LABEL_APP)})
    wait(system, lambda: system.verified(bad) != 0, timeout=200, what='config error report')
    message = system.messages(bad)[-1]
    assert system.verified(bad) == -1 and 'ubuntu-jammy' in message, message
    assert [r['systems'] for r in routes] == [[LAUNCHER_SYSTEM]]
    assert system.service.zk.get_request_ids() == []


def test_providers_follow_the_merged_config_not_proposed_changes(system):
    """The scheduler publishes the providers of the tenant's merged
    config after every reconfiguration; a proposed change that adds one
    publishes nothing."""
    system.create_projects()
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/nodes.yaml': node_objects('zl-node')}, 'Node objects')
    system.start()
    client = system.service.zk.client
    (provider,) = launcher_config.read_all(client).values()
    assert provider.name == ZL_PROVIDER and provider.connection == 'netns'
    assert provider.label_by_name('zl-node') is not None
    # Proposed in an untrusted project: speculative layouts never publish.
    change = system.store.create_change('org/app', 'master', 'Propose a provider', {
        '.zuul.yaml': textwrap.dedent(APP_CONFIG_WITH_PROVIDER)})
    wait(system, lambda: system.verified(change) != 0, timeout=180, what='check report')
    assert list(launcher_config.read_all(client)) == [provider.canonical_name]
    # Merged: a second label in the provider is published.
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/nodes.yaml': node_objects('zl-node', 'moving')}, 'Another label')
    wait(system, lambda: launcher_config.read_all(client)[provider.canonical_name]
             .label_by_name('moving') is not None, timeout=120, what='provider updated')
    # Removed from the config: unpublished.
    system.store.push_branch('org/project-config', 'master', {
        'zuul.d/nodes.yaml': '# no node objects\n'}, 'No providers')
    wait(system, lambda: launcher_config.read_all(client) == {}, timeout=120,
             what='provider removed')


APP_CONFIG_WITH_PROVIDER = """
- provider:
    name: proposed
    section: local
    labels:
      - name: zl-node
- project:
    queue: integrated
    check:
      jobs:
        - check-marker
"""
