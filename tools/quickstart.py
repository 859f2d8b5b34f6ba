"""The quickstart: the whole system on embedded defaults, and the main job
done in front of you.

Brings up, in this one process but each over its real protocol: a local
ZooKeeper, the scheduler with its embedded Gearman server, a merger, an
executor, zuul-web, nodepool-launcher with network-namespace nodes, and
the development code-review server (zuul.devtools.gerrit, speaking the
Gerrit SSH protocol). Two demo projects define check and gate jobs,
including a two-node job. Three changes are proposed (one of them breaks
the tests), approved into the gate, tested speculatively on top of each
other, and the good ones merge while the bad one is rejected. The system
then stays up (status page URL printed) until interrupted.

    tools/quickstart.sh [--no-wait] [--state-dir DIR] [--web-port N]

Needs root (network namespaces for the nodes). While it stays up it prints
the copy-paste commands to clone the demo project, push a change of your
own for review, recheck and approve it (see ``next_steps``), and reports
each build, vote and merge as it happens. Ctrl-C (or SIGTERM) stops every
daemon and removes every node.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TOP)

from nodepool.zk.localserver import LocalZooKeeper, free_port  # noqa: E402

TENANT = 'example'
# The lines around the printed next steps (tests read what is between).
NEXT_STEPS_BEGIN = '-' * 30 + ' next steps ' + '-' * 30
NEXT_STEPS_END = '-' * 72
LOG_RETENTION_DAYS = 30

PROJECT_CONFIG = {
    'zuul.d/pipelines.yaml': """
        - pipeline:
            name: check
            description: Newly uploaded patchsets enter this pipeline.
            manager: independent
            trigger:
              gerrit:
                - event: patchset-created
                - event: comment-added
                  comment: (?i)^(Patch Set [0-9]+:)?( [\\w\\\\+-]*)*(\\n\\n)?\\s*recheck
            success:
              gerrit:
                Verified: 1
            failure:
              gerrit:
                Verified: -1
        - pipeline:
            name: gate
            description: Approved changes are tested together, then merged.
            manager: dependent
            precedence: high
            require:
              gerrit:
                open: true
                current-patchset: true
                approval:
                  - Workflow: 1
            trigger:
              gerrit:
                - event: comment-added
                  approval:
                    - Workflow: 1
            start:
              gerrit:
                Verified: 0
            success:
              gerrit:
                Verified: 2
                submit: true
            failure:
              gerrit:
                Verified: -2
        """,
    'zuul.d/jobs.yaml': """
        - job:
            name: base
            parent: null
            description: The base job every job inherits from.
            timeout: 600
            pre-run: playbooks/base/pre.yaml
            nodeset:
              nodes:
                - name: node
                  label: ubuntu-jammy
        - nodeset:
            name: two-nodes
            nodes:
              - name: controller
                label: ubuntu-jammy
              - name: compute
                label: ubuntu-jammy
        """,
    # As zuul-jobs' start-zuul-console role: the console server on every
    # node, so command and shell output streams to the live log line by line.
    'playbooks/base/pre.yaml': """
        - hosts: all
          gather_facts: false
          tasks:
            - name: Start zuul_console daemon.
              zuul_console:
        """,
}

APP = {
    '.zuul.yaml': """
        - job:
            name: app-unit
            description: Run the project's tests on one node.
            run: playbooks/unit.yaml
        - job:
            name: app-two-nodes
            description: A two-node job; the controller reaches the compute node.
            nodeset: two-nodes
            run: playbooks/two-nodes.yaml
        - project:
            queue: integrated
            check:
              jobs:
                - app-unit
                - app-two-nodes
            gate:
              jobs:
                - app-unit
        """,
    'playbooks/unit.yaml': """
        - hosts: all
          gather_facts: false
          tasks:
            - name: Copy the tests to the node
              copy:
                src: "{{ zuul.executor.work_root }}/{{ zuul.project.src_dir }}/run_tests.sh"
                dest: "/tmp/{{ zuul.build }}-run_tests.sh"
            - name: Run the tests
              command: "sh /tmp/{{ zuul.build }}-run_tests.sh"
        """,
    'playbooks/two-nodes.yaml': """
        - hosts: controller
          gather_facts: false
          tasks:
            - name: Reach the compute node
              wait_for:
                host: "{{ hostvars['compute']['nodepool']['private_ipv4'] }}"
                port: 22
                timeout: 30
        """,
    'run_tests.sh': 'echo "running tests"\n'
                    'for t in one two; do sleep 1; echo "test $t passed"; done\n',
    'README': 'The demo application.\n',
}

LIB = {
    '.zuul.yaml': """
        - project:
            queue: integrated
            check:
              jobs:
                - lib-unit
            gate:
              jobs:
                - lib-unit
        - job:
            name: lib-unit
            run: playbooks/unit.yaml
        """,
    'playbooks/unit.yaml': """
        - hosts: all
          gather_facts: false
          tasks:
            - command: "true"
        """,
    'README': 'The demo library.\n',
}


def say(message: str) -> None:
    print(f'[{time.strftime("%H:%M:%S")}] {message}', flush=True)


def dedent_all(files: dict) -> dict:
    return {k: textwrap.dedent(v).lstrip('\n') for k, v in files.items()}


class Quickstart:
    def __init__(self, state_dir: str, web_port: int, keep_jobdir: bool = False):
        self.keep_jobdir = keep_jobdir
        self.state = state_dir
        self.web_port = web_port
        # (what, how to stop it), in start order; stopped in reverse.
        self.stops: list[tuple[str, object]] = []
        self.gerrit = None

    # -- bring-up -------------------------------------------------------------

    def start(self) -> None:
        from zuul.devtools.gerrit import DevGerritServer, ReviewStore
        if os.path.exists(self.state):
            shutil.rmtree(self.state)
        os.makedirs(self.state)
        say(f'State directory: {self.state}')
        self.key = os.path.join(self.state, 'zuul_id')
        subprocess.run(['ssh-keygen', '-q', '-t', 'ed25519', '-N', '', '-f', self.key],
                       check=True)
        with open(self.key + '.pub') as f:
            self.pubkey = f.read().strip()
        self.known_hosts = os.path.join(self.state, 'known_hosts')

        say('Starting ZooKeeper (TLS only, with client certificates)')
        self._make_certificates()
        self.zk = LocalZooKeeper(os.path.join(self.state, 'zookeeper'),
                                 tls=self.zk_server_tls,
                                 tls_only=(self.zk_tls['cert'], self.zk_tls['key'],
                                           self.zk_tls['ca']))
        self.zk.start()
        self.stops.append(('ZooKeeper', self.zk.stop))

        say('Starting the development code-review server (Gerrit protocol over SSH, '
            'change pages over HTTP)')
        self.store = ReviewStore(os.path.join(self.state, 'review'))
        self.gerrit = DevGerritServer(self.store, os.path.join(self.state, 'gerrit_host_key'),
                                      authorized_keys=[self.pubkey], http_port=0)
        # Change links (events, push output, and the status page's through
        # the connection's baseurl) open this server's change pages.
        self.store.set_canonical_url(self.gerrit.http_url)
        self.gerrit.start()
        self.stops.append(('code-review server', self.gerrit.stop))
        known_hosts = self.known_hosts
        with open(known_hosts, 'w') as f:
            f.write(f'[127.0.0.1]:{self.gerrit.port} {self.gerrit.host_key_line()}\n')
        self._give_to_sudo_user(self.key, self.key + '.pub', known_hosts)
        self.store.create_project('demo/project-config', dedent_all(PROJECT_CONFIG))
        self.store.create_project('demo/app', dedent_all(APP))
        self.store.create_project('demo/lib', dedent_all(LIB))

        self.gear_port = free_port()
        self._write_configs(known_hosts)
        self._start_nodepool()
        self._start_zuul()

    def _make_certificates(self) -> None:
        """ZooKeeper holds the secrets keys: the demo serves it over TLS
        only, as the sample configuration does, with a CA of its own; the
        keys in it are encrypted with a password made for this demo."""
        import secrets as random_secrets

        from zuul.lib.tlsgen import LocalCA
        ca = LocalCA(os.path.join(self.state, 'ssl'), 'quickstart-ca', days=30)
        self.zk_server_tls = ca.zookeeper_keystore()
        client = ca.issue('zk-client')
        self.zk_tls = {'cert': client.cert, 'key': client.key, 'ca': client.ca}
        self.keystore_password = random_secrets.token_urlsafe(24)

    def _write_configs(self, known_hosts: str) -> None:
        with open(os.path.join(self.state, 'main.yaml'), 'w') as f:
            f.write(textwrap.dedent(f"""
                - tenant:
                    name: {TENANT}
                    source:
                      gerrit:
                        config-projects:
                          - demo/project-config
                        untrusted-projects:
                          - demo/app
                          - demo/lib
                """))
        self.zuul_conf = os.path.join(self.state, 'zuul.conf')
        # Build dirs hold SSH control sockets, whose paths must stay short.
        self.job_dir = os.path.join(self.state, 'builds')
        if len(self.job_dir) > 40:
            self.job_dir = tempfile.mkdtemp(prefix='gkqs-', dir='/var/tmp')
            self.stops.append(('build directories',
                               lambda: shutil.rmtree(self.job_dir, ignore_errors=True)))
        with open(self.zuul_conf, 'w') as f:
            f.write(self._zuul_conf_text(known_hosts))
        # It holds the secret that signs admin tokens: only for whoever
        # runs the quickstart (create-auth-token reads it).
        os.chmod(self.zuul_conf, 0o600)
        self._give_to_sudo_user(self.zuul_conf)

    def _zuul_conf_text(self, known_hosts: str) -> str:
        """The demo's zuul.conf: every daemon on this machine, ZooKeeper
        over TLS, history in SQLite, an HS256 realm for admin tokens."""
        return textwrap.dedent(f"""
                [gearman]
                server = 127.0.0.1
                port = {self.gear_port}

                [gearman_server]
                start = true
                listen_address = 127.0.0.1
                port = {self.gear_port}

                [zookeeper]
                hosts = {self.zk.hosts}
                tls_cert = {self.zk_tls['cert']}
                tls_key = {self.zk_tls['key']}
                tls_ca = {self.zk_tls['ca']}

                [keystore]
                password = {self.keystore_password}

                [scheduler]
                tenant_config = {self.state}/main.yaml
                state_dir = {self.state}/scheduler

                [merger]
                git_dir = {self.state}/merger-git
                hostname = quickstart-merger
                git_user_email = zuul@example.org
                git_user_name = Zuul

                [executor]
                private_key_file = {self.key}
                hostname = localhost
                job_dir = {self.job_dir}
                state_dir = {self.state}/executor
                load_multiplier = 0
                min_avail_mem = 0
                finger_port = {free_port()}
                keep_jobdir = {str(self.keep_jobdir).lower()}
                log_root = {self.state}/logs
                log_url = http://127.0.0.1:{self.web_port}/logs/{{build}}/
                log_retention_days = {LOG_RETENTION_DAYS}

                [web]
                listen_address = 127.0.0.1
                port = {self.web_port}
                log_root = {self.state}/logs

                [database]
                dburi = sqlite:///{self.state}/history.sqlite

                [auth quickstart]
                driver = HS256
                allow_authz_override = true
                realm = quickstart
                default = true
                client_id = quickstart
                issuer_id = quickstart
                secret = {secrets.token_hex(32)}

                [connection gerrit]
                driver = gerrit
                server = 127.0.0.1
                port = {self.gerrit.port}
                baseurl = {self.gerrit.http_url}
                user = zuul
                sshkey = {self.key}
                known_hosts = {known_hosts}
                """)

    def _start_nodepool(self) -> None:
        from nodepool.config import load_config_text
        from nodepool.launcher.launcher import Launcher
        from nodepool.launcher.settings import LauncherSettings
        from nodepool.zk.api import NodepoolZooKeeper
        say('Starting nodepool-launcher (nodes are sshd in network namespaces)')
        self.netns_dir = os.path.join(self.state, 'netns')
        # A file of its own (with zookeeper-servers), so the nodepool
        # command reads the running demo: nodepool -c <this file> list.
        self.nodepool_yaml = os.path.join(self.state, 'nodepool.yaml')
        text = textwrap.dedent(f"""
            zookeeper-servers:
              - host: {self.zk.hosts.rsplit(':', 1)[0]}
                port: {self.zk.hosts.rsplit(':', 1)[1]}
            zookeeper-tls:
              cert: {self.zk_tls['cert']}
              key: {self.zk_tls['key']}
              ca: {self.zk_tls['ca']}
            labels:
              - name: ubuntu-jammy
                min-ready: 1
            providers:
              - name: quickstart-netns
                driver: netns
                bridge: qsbr0
                subnet: 10.234.0.0/16
                state-dir: {self.netns_dir}
                authorized-keys: ['{self.pubkey}']
                pools:
                  - name: main
                    max-servers: 12
                    labels:
                      - name: ubuntu-jammy
                        username: root
                        python-path: /usr/bin/python3
            """)
        with open(self.nodepool_yaml, 'w') as f:
            f.write(text)
        config = load_config_text(text)
        self.np_zk = NodepoolZooKeeper.from_hosts(self.zk.hosts, tls=self.zk_tls)
        self.launcher = Launcher(config, self.np_zk, LauncherSettings(
            cleanup_interval=5.0, poll_interval=1.0, min_ready_interval=5.0))
        self.launcher.start()
        self.stops.append(('nodepool-launcher and its nodes', self._stop_nodepool))

    def _stop_nodepool(self) -> None:
        from nodepool.driver.netns.host import NetnsHostManager
        self.launcher.stop()
        self.np_zk.close()
        NetnsHostManager(self.netns_dir, '10.234.0.0/16', 'qsbr0').cleanup_all(
            'quickstart-netns-')
        subprocess.run(['ip', 'link', 'del', 'qsbr0'], capture_output=True)

    def _start_zuul(self) -> None:
        from zuul.cmd.executor import build_merger
        from zuul.cmd.merger import build_server as build_merger_server
        from zuul.cmd.web import WebSettings, build_web
        from zuul.configloader.zuulconf import load_config_parser, load_zuul_conf
        from zuul.driver.registry import default_registry
        from zuul.executor.server import ExecutorServer
        from zuul.executor.settings import ExecutorSettings
        from zuul.scheduler.service import SchedulerService
        conf = load_zuul_conf(self.zuul_conf, default_registry())
        raw = load_config_parser(self.zuul_conf)
        say('Starting the scheduler\'s embedded Gearman server')
        self.scheduler_service = SchedulerService(conf)
        self.scheduler_service.start_gearman()
        say('Starting zuul-merger')
        settings = ExecutorSettings.from_config(raw)
        # As the daemons run it: zuul-merger on [merger] git_dir, the
        # executor on its own cache.  (Two Mergers on one git directory
        # each lock only their own view of it, and their git runs
        # collide: a change "does not merge" now and then.)
        self.merger = build_merger_server(conf)
        self.merger.start()
        merger_stop = ('zuul-merger', self.merger.stop)
        self.stops.append(merger_stop)
        say('Starting zuul-executor')
        self.executor = ExecutorServer(settings, '127.0.0.1', self.gear_port,
                                       build_merger(raw, settings))
        self.executor.start()
        self.stops.append(('zuul-executor', self.executor.stop))
        say('Starting the scheduler (it loads the tenant through the merger)')
        self.scheduler_service.start()
        # Propose nothing before the event stream is up: events sent
        # earlier would reach nobody.
        gerrit = self.scheduler_service.connections.get('gerrit')
        if not gerrit.stream.connected.wait(60):
            raise SystemExit('The scheduler could not connect to the code-review server')
        say('Starting zuul-web')
        self.web, self.web_rpc = build_web(WebSettings.from_config(raw))
        self.web.start()
        self.stops.append(('zuul-web', lambda: (self.web.stop(), self.web_rpc.shutdown())))
        # Stopped first: its event intake and reporters go before anything
        # else, so stopping leaves no vote on any change; the builds the
        # executor then aborts are never reported.
        self.stops.append(('scheduler and Gearman server', self.scheduler_service.stop))
        say(f'Status page: http://127.0.0.1:{self.web_port}/t/{TENANT}/status')

    def stop(self) -> None:
        stops, self.stops = self.stops, []
        if not stops:
            return
        say('stopping: ' + ', '.join(name for name, _ in reversed(stops)))
        for name, stop in reversed(stops):
            try:
                stop()
            except Exception as e:  # keep stopping the rest
                say(f'(while stopping {name}: {e})')
        say('stopped: nothing of the quickstart is left running')

    @staticmethod
    def _give_to_sudo_user(*paths: str) -> None:
        """Run through sudo, let the user who ran it use the key and
        known_hosts in the printed commands (ssh refuses a key it cannot
        read, or one others can read)."""
        uid, gid = os.environ.get('SUDO_UID'), os.environ.get('SUDO_GID')
        if os.geteuid() != 0 or not uid or not uid.isdigit():
            return
        for path in paths:
            os.chown(path, int(uid), int(gid) if gid and gid.isdigit() else -1)

    # -- what happens, as it happens -----------------------------------------------

    def follow_reviews(self) -> None:
        """Print each upload, vote, recheck, approval and merge."""
        self.store.subscribe(self._on_review_event)

    def _on_review_event(self, event: dict) -> None:
        line = describe_event(event)
        if line:
            say(line)

    # -- the scenario ------------------------------------------------------------

    def status(self) -> dict:
        url = f'http://127.0.0.1:{self.web_port}/api/tenant/{TENANT}/status'
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)

    def vote(self, change) -> int:
        return self.store.get_change(change.number).approval_value('Verified')

    def wait(self, what: str, done, timeout: float = 600.0) -> None:
        deadline = time.time() + timeout
        while not done():
            if time.time() > deadline:
                raise SystemExit(f'Timed out waiting for {what}')
            self.print_progress()
            time.sleep(1.0)

    _last_progress: str | None = None

    def print_progress(self) -> None:
        """Print which item runs which job whenever that changes (and
        once when the pipelines empty)."""
        line = self.progress_line()
        if line == self._last_progress:
            return
        if line:
            say(line)
        elif self._last_progress:
            say('pipelines: idle')
        self._last_progress = line

    def keep_running(self) -> None:
        """Until interrupted: print progress as it changes."""
        while True:
            self.print_progress()
            time.sleep(1.0)

    def progress_line(self) -> str | None:
        try:
            status = self.status()
        except Exception:
            return None
        parts = []
        for pipeline in status.get('pipelines', []):
            for queue in pipeline.get('change_queues', []):
                for head in queue.get('heads', []):
                    for item in head:
                        if item.get('live') is False:
                            continue    # only there as a dependency of the next
                        jobs = ', '.join(f'{j["name"]}={_job_state(j)}'
                                         for j in item.get('jobs', []))
                        ahead = f' on top of {item["item_ahead"]}' if item.get('item_ahead') \
                            else ''
                        parts.append(f'{pipeline["name"]}: {item["id"]}{ahead} [{jobs}]')
        return '; '.join(parts) or None

    def scenario(self) -> bool:
        store = self.store
        self.follow_reviews()
        say('Proposing three changes to demo/app (the second one breaks the tests)')
        good1 = store.create_change('demo/app', 'master', 'Add a feature',
                                    {'feature.txt': 'a feature\n'})
        bad = store.create_change('demo/app', 'master', 'Break the tests',
                                  {'run_tests.sh': 'echo "a test fails"; exit 1\n'})
        good2 = store.create_change('demo/app', 'master', 'Add documentation',
                                    {'docs.txt': 'documentation\n'})
        changes = [good1, bad, good2]
        self.wait('check results', lambda: all(self.vote(c) for c in changes))
        for c in changes:
            say(f'check: change {c.number} "{c.subject}" got Verified {self.vote(c):+d}')
        say('Approving all three: they enter the gate together')
        for c in changes:
            store.approve(c, 'Workflow', 1, who='core-reviewer')
        self.wait('gate results', lambda: all(
            store.get_change(c.number).status == 'MERGED' or self.vote(c) == -2
            for c in changes))
        ok = True
        for c in changes:
            state = store.get_change(c.number).status
            say(f'gate: change {c.number} "{c.subject}": {state} (Verified {self.vote(c):+d})')
        ok = store.get_change(good1.number).status == 'MERGED' and \
            store.get_change(good2.number).status == 'MERGED' and \
            store.get_change(bad.number).status == 'NEW'
        say('The good changes merged and the broken one was rejected.' if ok else
            'Unexpected outcome: see the messages above.')
        if not ok:
            # Zuul's last report on each change, whole (its job lines say
            # which job ended how, and why).
            for c in changes:
                reports = [r['message'] for r in store.review_log
                           if r['change'] == c.number and r['user'] == 'zuul']
                say(f'last report on change {c.number}:\n{reports[-1] if reports else "(none)"}')
        return ok


def describe_event(event: dict) -> str | None:
    """One line for a review event worth telling (None for the rest)."""
    kind = event.get('type')
    change = event.get('change') or {}
    ps = (event.get('patchSet') or {}).get('number')
    what = f'change {change.get("number")},{ps} "{change.get("subject")}"'
    if kind == 'patchset-created':
        who = (event.get('uploader') or {}).get('username')
        return f'review: {what} uploaded by {who}'
    if kind == 'change-merged':
        return f'review: {what} MERGED into {change.get("branch")}'
    if kind != 'comment-added':
        return None
    who = (event.get('author') or {}).get('username')
    votes = ', '.join(f'{a["type"]} {int(a["value"]):+d}'
                      for a in event.get('approvals', []) if int(a.get('value') or 0))
    comment = (event.get('comment') or '').split('\n\n', 1)
    first = comment[1].strip().splitlines()[0] if len(comment) > 1 and comment[1].strip() \
        else ''
    if not votes and not first:
        return None
    said = f': {first[:70]}' if first else ''
    return f'review: {who} on {what}' + (f' [{votes}]' if votes else '') + said


def next_steps(state: str, gerrit_port: int, web_port: int, nodepool: str,
               project: str = 'demo/app', user: str = 'dev', approver: str = 'core',
               zuul_admin: str = 'zuul-admin') -> str:
    """The copy-paste commands printed when the scenario is done: each
    step is ``# what it does`` (where to look, for the steps that are a
    page to open), then its shell lines, all to run in order in one shell
    (the clone step ends inside the clone)."""
    key = os.path.join(state, 'zuul_id')
    known_hosts = os.path.join(state, 'known_hosts')
    ssh_opts = f'-i {key} -o UserKnownHostsFile={known_hosts}'
    host = '127.0.0.1'
    remote = f'ssh -p {gerrit_port} {ssh_opts}'
    web = f'http://127.0.0.1:{web_port}'
    name = project.rsplit('/', 1)[-1]
    hooks = '"$(git rev-parse --git-dir)/hooks/"'
    head = '"$(git rev-parse HEAD)"'
    token = (f'{zuul_admin} -c {state}/zuul.conf create-auth-token --auth-config quickstart '
             f'--user admin --tenant {TENANT} --expires-in 3600')
    return textwrap.dedent(f"""\
        # Clone the demo project (and install the commit-msg hook, which adds a Change-Id)
        export GIT_SSH_COMMAND='ssh {ssh_opts}'
        git clone ssh://{user}@{host}:{gerrit_port}/{project} && cd {name}
        scp -p -P {gerrit_port} {ssh_opts} {user}@{host}:hooks/commit-msg {hooks}
        git config user.name 'Quickstart Developer' && git config user.email {user}@example.com
        # Commit a change
        echo 'echo "hello from my change"' >> run_tests.sh
        git commit -a -m 'Say hello from the tests'
        # Push it for review (check runs; the push prints the change's page)
        git push origin HEAD:refs/for/master
        # Run check again
        {remote} {user}@{host} gerrit review -m recheck {head}
        # Approve it (gate runs, then it merges)
        {remote} {approver}@{host} gerrit review --code-review 2 --workflow 1 {head}
        # Watch it on the status page: {web}/t/{TENANT}/status
        # (a running job's name opens its live log, every line as the node prints it)
        # See the build logs: the Logs link of each build on {web}/t/{TENANT}/builds
        # (kept {LOG_RETENTION_DAYS} days in {state}/logs/<build uuid>/, job-output.txt first)
        # Act as an admin (Dequeue, Promote, Enqueue): print a token, paste it at "Log in"
        {token}
        # Look at the nodes and node requests
        {nodepool} -c {state}/nodepool.yaml list
        {nodepool} -c {state}/nodepool.yaml request-list
        """)


def nodepool_command(name: str = 'nodepool') -> str:
    """How to run a command of this distribution (``nodepool``,
    ``zuul-admin``): the one beside this Python (the virtualenv's) when
    it is not on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.exists(beside) and shutil.which(name) != beside:
        return beside
    return name


def _job_state(job: dict) -> str:
    if job.get('result'):
        return job['result']
    return 'running' if job.get('start_time') else 'waiting'


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--no-wait', action='store_true',
                        help='stop after the scenario instead of staying up')
    parser.add_argument('--state-dir', default='/var/tmp/gatekeep-quickstart')
    parser.add_argument('--web-port', type=int, default=9000)
    parser.add_argument('--debug', action='store_true')
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print('The quickstart needs root: its nodes are network namespaces.', file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format='%(asctime)s %(levelname)s %(name)s: %(message)s',
                        filename=None if args.debug else os.path.join('/tmp',
                                                                       'quickstart.log'))
    qs = Quickstart(os.path.abspath(args.state_dir), args.web_port, keep_jobdir=args.debug)

    def on_term(*_):
        # Unwind through the finally below so every daemon and node is
        # stopped and cleaned up, whenever the signal arrives.
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    started = time.time()
    try:
        qs.start()
        ok = qs.scenario()
        say(f'Scenario finished in {time.time() - started:.0f} s')
        if args.no_wait:
            return 0 if ok else 1
        say('The system keeps running. Try the daily loop yourself: copy and paste')
        print(NEXT_STEPS_BEGIN)
        print(next_steps(qs.state, qs.gerrit.port, args.web_port, nodepool_command(),
                         zuul_admin=nodepool_command('zuul-admin')), end='')
        print(NEXT_STEPS_END, flush=True)
        say('Progress is printed below as it happens. Press Ctrl-C to stop everything.')
        try:
            qs.keep_running()
        except KeyboardInterrupt:
            say('Interrupted')
        return 0 if ok else 1
    except KeyboardInterrupt:
        say('Interrupted: stopping everything')
        return 130
    finally:
        # A second Ctrl-C must not cut the clean-up short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        qs.stop()


if __name__ == '__main__':
    sys.exit(main())
