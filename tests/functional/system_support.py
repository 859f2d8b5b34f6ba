"""A whole Zuul for end-to-end tests: the development Gerrit (over SSH),
a real ZooKeeper chroot, a real Gearman server, zuul-merger,
zuul-executor and the scheduler daemon's service, all in this process
but talking over their real protocols.

For fault tests any of the three also runs as a real OS process of its
console-script module (``system.start_daemon('executor', name='ex2')``,
``start(executor=False)`` to leave the in-process one out): see
:class:`DaemonProcess`. With the scheduler as a process, observe results
through Gerrit (``verified``, ``messages``), the RPC (``status``, ``rpc``)
and the build history database (``build_history``), never through
in-process objects."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap

import pytest

from tests.harness.daemons import DaemonProcess, gear_jobs
from tests.harness.waiting import wait_for
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.driver.registry import default_registry
from zuul.executor.server import ExecutorServer
from zuul.executor.settings import ExecutorSettings
from zuul.merger.merger import Merger
from zuul.merger.repos import RepoUrlResolver
from zuul.merger.server import MergeServer
from zuul.scheduler.service import SchedulerService

# Scripts trusted test jobs run on the executor (image builds).
TOOLS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'tools')


def gerrit_gate_pipeline(extra: str = '', start: bool = False) -> str:
    """A gate on Workflow +1 that submits with Verified +2 (and, with
    ``start``, sets Verified 0 when it starts), with ``extra`` (pipeline
    keys, indented four spaces) added, followed by a ``base`` job with a
    300 s timeout."""
    started = '    start:\n      gerrit:\n        Verified: 0\n' if start else ''
    return f"""
- pipeline:
    name: gate
    manager: dependent
{extra}    require:
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
{started}    success:
      gerrit:
        Verified: 2
        submit: true
    failure:
      gerrit:
        Verified: -2
- job:
    name: base
    parent: null
    timeout: 300
"""


# Verified +1/-1 on every new patchset and on "recheck".
CHECK_PIPELINE = """
- pipeline:
    name: check
    manager: independent
    trigger:
      gerrit:
        - event: patchset-created
        - event: comment-added
          comment: (?i)^\\s*recheck\\s*$
    success:
      gerrit:
        Verified: 1
    failure:
      gerrit:
        Verified: -1
"""

BASE_PIPELINES = CHECK_PIPELINE + gerrit_gate_pipeline(
    '    success-message: Build succeeded (gate pipeline).\n', start=True) + """- pipeline:
    name: post
    manager: supercedent
    post-review: true
    trigger:
      gerrit:
        - event: ref-updated
          ref: ^refs/heads/.*$
- pipeline:
    name: periodic
    manager: independent
    precedence: low
    trigger:
      timer:
        - time: '* * * * * */2'
- job:
    name: check-marker
    description: Fails when any project under test has a FAIL file.
    run: playbooks/check-marker.yaml
- job:
    name: noop-ok
    run: playbooks/noop.yaml
- project:
    name: org/lib
    queue: integrated
    check:
      jobs:
        - check-marker
    gate:
      jobs:
        - check-marker
"""

# Pipelines driven by the zuul driver's events. project-change-merged enqueues
# every open change of a project whenever one merges, so benchmarks leave
# them out (see benchmarks/scheduler.py).
ZUUL_DRIVER_PIPELINES = """
- pipeline:
    name: dependents
    manager: independent
    trigger:
      zuul:
        - event: parent-change-enqueued
          pipeline: gate
- pipeline:
    name: merge-check
    manager: independent
    trigger:
      zuul:
        - event: project-change-merged
"""

PIPELINES = BASE_PIPELINES + ZUUL_DRIVER_PIPELINES

NOOP = """
- hosts: localhost
  gather_facts: false
  tasks:
    - debug:
        msg: "{{ zuul.pipeline }} {{ zuul.ref }}"
"""

CHECK_MARKER = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Look for markers in every project checked out
      find:
        paths: "{{ zuul.executor.work_root }}/src"
        patterns: FAIL
        recurse: true
      register: markers
    - name: Fail on request
      fail:
        msg: "A change asked to fail: {{ markers.files | map(attribute='path') | list }}"
      when: markers.matched > 0
"""

APP_CONFIG = """
- project:
    queue: integrated
    check:
      jobs:
        - check-marker
    gate:
      jobs:
        - check-marker
"""


def _status_items(status: dict) -> list[tuple[str, str]]:
    return [(pipeline['name'], item['id']) for pipeline in status['pipelines']
            for queue in pipeline['change_queues'] for chain in queue['heads']
            for item in chain]


DAEMON_ZK_SESSION_TIMEOUT = 4


class ZuulSystem:
    def __init__(self, root: str, gerrit, zk_hosts: str, gear_port: int, key_path: str):
        self.root = root
        self.gerrit = gerrit
        self.store = gerrit.store
        self.gear_port = gear_port
        self.key_path = key_path
        self.daemons: dict[str, DaemonProcess] = {}     # by name
        self.in_process: set[str] = set()   # 'scheduler', 'executor', 'merger' started here
        options = {'server': '127.0.0.1', 'port': str(gerrit.server.port), 'user': 'zuul',
                   'sshkey': gerrit.key_path, 'known_hosts': gerrit.known_hosts}
        with open(os.path.join(root, 'main.yaml'), 'w') as f:
            f.write(textwrap.dedent("""
                - tenant:
                    name: example
                    source:
                      gerrit:
                        config-projects:
                          - org/project-config
                        untrusted-projects:
                          - org/app
                          - org/lib
                """))
        # A statsd "server": every metric packet the scheduler sends.
        self.statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.statsd.bind(('127.0.0.1', 0))
        self.statsd.settimeout(0.2)
        conf_path = os.path.join(root, 'zuul.conf')
        with open(conf_path, 'w') as f:
            f.write(textwrap.dedent(f"""
                [gearman]
                server = 127.0.0.1
                port = {gear_port}

                [zookeeper]
                hosts = {zk_hosts}

                [keystore]
                password = system-test-keystore-password

                [scheduler]
                tenant_config = {root}/main.yaml
                state_dir = {root}/state
                pidfile = {root}/scheduler.pid

                [database]
                dburi = sqlite:///{root}/history.sqlite

                [statsd]
                server = 127.0.0.1
                port = {self.statsd.getsockname()[1]}

                [connection gerrit]
                driver = gerrit
                """))
            for key, value in options.items():
                f.write(f'{key} = {value}\n')
        self.conf_path = conf_path
        self.conf = load_zuul_conf(conf_path, default_registry())
        self.resolver = resolver = RepoUrlResolver(
            {'gerrit': {'driver': 'gerrit', 'options': options}})
        self.merge_server = MergeServer([('127.0.0.1', gear_port)],
                                        Merger(f'{root}/merger', resolver,
                                               git_user_email='zuul@example.org',
                                               git_user_name='Zuul'))
        settings = ExecutorSettings(hostname='executor.example.org', job_dir=f'{root}/b',
                                    state_dir=f'{root}/es', private_key_file=key_path,
                                    load_multiplier=0, min_avail_mem=0, log_stream_port=0,
                                    log_stream_host='127.0.0.1',
                                    keep_jobdir=bool(os.environ.get('ZUUL_KEEP_JOBDIR')),
                                    # Trusted playbooks run sandboxed: the
                                    # tests' marker files live under root,
                                    # image build scripts in tools/.
                                    trusted_rw_paths=[root],
                                    trusted_ro_paths=[TOOLS_DIR])
        self.executor = ExecutorServer(settings, '127.0.0.1', gear_port,
                                       Merger(f'{root}/executor-git', resolver,
                                              git_user_email='zuul@example.org',
                                              git_user_name='Zuul'))
        self.service = SchedulerService(self.conf)
        self.launcher_procs: list = []     # zuul-launcher processes

    def add_git_connection(self, name: str, baseurl: str, projects: list[str],
                           poll_delay: int = 1) -> None:
        """Before start(): a ``[connection NAME]`` of the git driver whose
        projects join the tenant as untrusted projects."""
        with open(self.conf_path, 'a') as f:
            f.write(f'\n[connection {name}]\ndriver = git\nbaseurl = {baseurl}\n'
                    f'poll_delay = {poll_delay}\n')
        with open(os.path.join(self.root, 'main.yaml'), 'a') as f:
            f.write(f'      {name}:\n        untrusted-projects:\n')
            for project in projects:
                f.write(f'          - {project}\n')
        self.conf = load_zuul_conf(self.conf_path, default_registry())
        self.resolver.mapping[name] = {'driver': 'git', 'options': {'baseurl': baseurl}}
        self.service = SchedulerService(self.conf)

    def configure_scheduler(self, **options) -> None:
        """Before start(): set ``[scheduler]`` options of the in-process
        scheduler (e.g. ``standby='false'``: an active scheduler)."""
        import configparser
        config = configparser.RawConfigParser()
        config.read(self.conf_path)
        config['scheduler'].update({k: str(v) for k, v in options.items()})
        with open(self.conf_path, 'w') as f:
            config.write(f)
        self.conf = load_zuul_conf(self.conf_path, default_registry())
        self.service = SchedulerService(self.conf)

    def add_provider_connection(self, name: str, driver: str, **options) -> None:
        """Before start(): a ``[connection NAME]`` naming a node provider
        for zuul-launcher (seed 001), e.g. ``driver=netns``; option names
        are written as given (``state-dir``)."""
        with open(self.conf_path, 'a') as f:
            f.write(f'\n[connection {name}]\ndriver = {driver}\n')
            for key, value in options.items():
                f.write(f'{key} = {value}\n')
        self.conf = load_zuul_conf(self.conf_path, default_registry())
        self.service = SchedulerService(self.conf)

    def start_zuul_launcher(self, timeout: float = 60.0, **launcher_options):
        """A real ``zuul-launcher`` process on this system's zuul.conf
        (``[launcher]`` written on the first call); it is stopped by
        stop().  Waits until it has registered in ZooKeeper."""
        from nodepool.zk.paths import ZUUL_LAUNCHER
        if not getattr(self, '_launcher_section', False):
            options = {'state_dir': f'{self.root}/launcher', 'poll_interval': '0.2',
                       'cleanup_interval': '1', **launcher_options}
            with open(self.conf_path, 'a') as f:
                f.write('\n[launcher]\n')
                for key, value in options.items():
                    f.write(f'{key} = {value}\n')
            self._launcher_section = True
        log = open(os.path.join(self.root, 'zuul-launcher.log'), 'ab')
        proc = subprocess.Popen([sys.executable, '-m', 'zuul.cmd.launcher', '-c',
                                 self.conf_path, '-d'], stdout=log, stderr=subprocess.STDOUT,
                                cwd=self.root, start_new_session=True)
        log.close()
        self.launcher_procs.append(proc)
        client = self.service.zk.client if getattr(self.service, 'zk', None) else None
        if client is not None and not client.connected:
            client = None           # the scheduler is stopped (restart_scheduler)
        if client is not None:
            before = set(client.get_children(ZUUL_LAUNCHER.launcher_root))

            def registered():
                if proc.poll() is not None:
                    raise AssertionError(f'zuul-launcher exited with {proc.returncode}:\n'
                                         + self.launcher_log()[-3000:])
                return set(client.get_children(ZUUL_LAUNCHER.launcher_root)) - before
            wait_for(registered, timeout=timeout, what='zuul-launcher registered')
        return proc

    def launcher_log(self) -> str:
        path = os.path.join(self.root, 'zuul-launcher.log')
        if not os.path.exists(path):
            return ''
        with open(path, errors='replace') as f:
            return f.read()

    def stop_zuul_launchers(self) -> None:
        for proc in self.launcher_procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self.launcher_procs = []

    def create_projects(self, app_config: str = APP_CONFIG,
                        pipelines: str = PIPELINES, config_files: dict | None = None) -> None:
        """org/project-config (``pipelines`` and the playbooks, plus
        ``config_files``: path -> text), org/app (``app_config`` as its
        .zuul.yaml) and org/lib."""
        self.store.create_project('org/project-config', {
            'zuul.d/pipelines.yaml': textwrap.dedent(pipelines),
            'playbooks/check-marker.yaml': textwrap.dedent(CHECK_MARKER),
            'playbooks/noop.yaml': textwrap.dedent(NOOP),
            **{path: textwrap.dedent(text) for path, text in (config_files or {}).items()}})
        self.store.create_project('org/app', {'.zuul.yaml': textwrap.dedent(app_config),
                                              'README': 'app\n'})
        self.store.create_project('org/lib', {'README': 'lib\n'})

    def start(self, scheduler: bool = True, executor: bool = True,
              merger: bool = True) -> None:
        """Start the in-process merger, executor and scheduler service;
        ``False`` leaves that one out (run it as a process with
        start_daemon, before or after).  The scheduler loads its tenants
        through a merger (or an executor's merger functions): start one
        first."""
        if merger:
            self.merge_server.start()
            self.in_process.add('merger')
        if executor:
            self.executor.start()
            self.in_process.add('executor')
        if scheduler:
            if self._scheduler_daemon() is not None:
                raise RuntimeError('a scheduler process runs already')
            self._record_launches()     # before its first pass can launch
            self.service.start()
            self.in_process.add('scheduler')
            gerrit = self.service.connections.get('gerrit')
            # An active scheduler (standby = false) listens once it holds
            # the intake's lock, a moment after it started.
            wait_for(lambda: gerrit.stream is not None and gerrit.stream.connected.is_set(),
                     timeout=30, what="the scheduler's Gerrit event stream")
            wait_for(lambda: self.gerrit.server.stream_count() >= 1, what='event stream')

    # -- daemons as processes --------------------------------------------
    def start_daemon(self, kind: str, name: str | None = None, wait: bool = True,
                     sections: dict | None = None, **options) -> DaemonProcess:
        """Start ``zuul-<kind>`` (``scheduler``, ``executor``, ``merger``)
        as a real process and return its :class:`DaemonProcess`.

        Each runs on a zuul.conf of its own, ``<root>/<name>/zuul.conf``,
        written once: this system's zuul.conf (same Gearman server, the
        fixture's; same ZooKeeper, connections, tenants, database) with
        ``[zookeeper] session_timeout`` at DAEMON_ZK_SESSION_TIMEOUT, plus,
        for an executor or merger, its section with its own hostname
        ``<name>.example.org``, directories and command socket.
        ``options`` are extra keys of the daemon's own section (e.g.
        ``disable_merger='true'``), ``sections`` maps other sections to
        keys set on top (``{'connection gerrit': {'port': ...}}``).  A
        scheduler process excludes the in-process service.
        """
        if kind not in ('scheduler', 'executor', 'merger'):
            raise ValueError(f'unknown daemon kind {kind!r}')
        if kind == 'scheduler':
            if 'scheduler' in self.in_process or self._scheduler_daemon() is not None:
                raise RuntimeError('a scheduler runs already')
            name = name or 'scheduler'
        else:
            name = name or f'{kind}{1 + sum(d.kind == kind for d in self.daemons.values())}'
        if name in self.daemons:
            raise ValueError(f'there is a daemon named {name} already')
        hostname = f'{name}.example.org' if kind != 'scheduler' else None
        conf = self._daemon_conf(kind, name, hostname, options, sections or {})
        daemon = DaemonProcess(self, kind, name, conf, hostname=hostname)
        self.daemons[name] = daemon
        return daemon.start(wait=wait)

    def _daemon_conf(self, kind: str, name: str, hostname: str | None, options: dict,
                     sections: dict) -> str:
        """Write the zuul.conf of one daemon process; returns its path."""
        import configparser
        home = os.path.join(self.root, name)
        os.makedirs(home, exist_ok=True)
        config = configparser.RawConfigParser()
        config.read(self.conf_path)
        config['zookeeper']['session_timeout'] = str(DAEMON_ZK_SESSION_TIMEOUT)
        section = {}
        if kind != 'scheduler':
            section = {'hostname': hostname, 'git_dir': f'{home}/git',
                       'command_socket': f'{home}/{kind}.socket'}
            config[kind] = {}
            if kind == 'executor':
                config['merger'] = {}
            # git_user_* of [merger] are the executor's too
            config['merger'].update({'git_user_email': 'zuul@example.org',
                                     'git_user_name': 'Zuul'})
        if kind == 'executor':
            # as the in-process ExecutorServer of __init__ is set up
            section.update({
                'job_dir': f'{home}/b', 'state_dir': f'{home}/state',
                'private_key_file': self.key_path, 'load_multiplier': '0',
                'min_avail_mem': '0', 'log_stream_port': '0',
                'log_stream_host': '127.0.0.1', 'trusted_rw_paths': self.root,
                'trusted_ro_paths': TOOLS_DIR,
                'keep_jobdir': 'true' if os.environ.get('ZUUL_KEEP_JOBDIR') else 'false'})
        config[kind].update(section)
        config[kind].update({k: str(v) for k, v in options.items()})
        for section_name, values in sections.items():
            if not config.has_section(section_name):
                config[section_name] = {}
            config[section_name].update({k: str(v) for k, v in values.items()})
        path = os.path.join(home, 'zuul.conf')
        with open(path, 'w') as f:
            config.write(f)
        return path

    def _scheduler_daemon(self) -> DaemonProcess | None:
        return next((d for d in self.daemons.values()
                     if d.kind == 'scheduler' and d.running), None)

    def daemon(self, name: str) -> DaemonProcess:
        return self.daemons[name]

    def executor_of(self, build_uuid: str) -> DaemonProcess | None:
        """The executor process holding ``build_uuid``'s build dir."""
        return next((d for d in self.daemons.values()
                     if d.kind == 'executor' and build_uuid in d.build_dirs()), None)

    # -- observing a system whose scheduler may be a process -------------
    def rpc(self, function: str, timeout: float = 60.0, **request):
        """One ``zuul:*`` RPC call to whichever scheduler runs (e.g.
        ``system.rpc('zuul:enqueue', tenant=..., pipeline=..., ...)``)."""
        from zuul.lib.rpc import RPCClient
        from zuul.lib.rpc_protocol import RPCRequest
        client = RPCClient('127.0.0.1', self.gear_port, timeout=timeout)
        try:
            return client.call(function, RPCRequest(**request))
        finally:
            client.shutdown()

    def status(self, tenant: str = 'example') -> dict:
        """The tenant's status (as the web status page gets it)."""
        from zuul.lib.rpc_protocol import STATUS_GET
        return self.rpc(STATUS_GET, tenant=tenant)

    def queued_items(self, tenant: str = 'example') -> list[tuple[str, str]]:
        """(pipeline, change id) of every item the scheduler holds, from
        its status."""
        return _status_items(self.status(tenant))

    def wait_idle(self, tenant: str = 'example', timeout: float = 120.0) -> None:
        """Until the scheduler (in this process or not) holds no item and
        no event, and Gearman no job: settle() seen from outside."""
        def idle():
            status = self.status(tenant)
            return (not _status_items(status)
                    and not any(status[q]['length'] for q in (
                        'trigger_event_queue', 'management_event_queue',
                        'result_event_queue'))
                    and not any(total for total, _ in gear_jobs(self.gear_port).values()))
        wait_for(idle, timeout=timeout, what='the system idle')

    def build_history(self, tenant: str = 'example', **filters) -> list[dict]:
        """Finished builds from the build database (``[database]``),
        newest first, as the web API lists them."""
        from zuul.driver.sql.history import BuildHistory
        if 'scheduler' in self.in_process:
            # Its rows are written off its loop: those asked for so far.
            flush = getattr(getattr(self.service.scheduler, 'history', None), 'flush', None)
            if flush is not None:
                flush(60)
        return BuildHistory(self.conf.database.dburi).get_builds(tenant, **filters)

    def _record_launches(self) -> None:
        """Observe (not replace) the executor adapter of this system's
        scheduler service: every build launched, with the changes it was
        tested on top of, from before the service starts (its first pass
        may launch at once, e.g. an image's startup build). The lists
        start afresh with each service."""
        from zuul.scheduler.builds import ExecutorAdapter
        self.launches: list[dict] = []
        self.builds: list = []      # the scheduler's Build objects, in launch order
        if getattr(self, '_unobserve', None) is not None:
            return
        real = ExecutorAdapter.execute
        system = self

        def execute(adapter, tenant, pipeline, item, job, nodeset, build):
            scheduler = getattr(getattr(system, 'service', None), 'scheduler', None)
            if adapter is getattr(scheduler, 'executor', None):
                bs = item.current_build_set
                system.launches.append({
                    'pipeline': pipeline.name, 'job': job.name,
                    'change': getattr(item.change, 'number', None) or item.change.ref,
                    'ahead': [getattr(i.change, 'number', None) for i in bs.dependent_items]})
                system.builds.append(build)
            return real(adapter, tenant, pipeline, item, job, nodeset, build)
        ExecutorAdapter.execute = execute

        def unobserve():
            ExecutorAdapter.execute = real
        self._unobserve = unobserve

    def restart_scheduler(self, down=None) -> None:
        """Stop the scheduler daemon's service, call ``down()`` (if given)
        while none runs, and start a new one on the same zuul.conf (its
        launch records start afresh)."""
        self.service.stop()
        if down is not None:
            down()
        self.service = SchedulerService(self.conf)
        self._record_launches()
        self.service.start()
        gerrit = self.service.connections.get('gerrit')
        assert gerrit.stream.connected.wait(30)

    def stop(self) -> None:
        self.statsd.close()
        stops = [self.stop_zuul_launchers]
        stops += [lambda d=d: d.terminate(timeout=15) for d in self.daemons.values()
                  if d.kind == 'scheduler']
        if 'scheduler' in self.in_process:
            stops.append(self.service.stop)
        stops += [lambda d=d: d.terminate(timeout=15) for d in self.daemons.values()
                  if d.kind != 'scheduler']
        if 'executor' in self.in_process:
            stops.append(self.executor.stop)
        if 'merger' in self.in_process:
            stops.append(self.merge_server.stop)
        if getattr(self, '_unobserve', None) is not None:
            stops.append(self._unobserve)
        for stop in stops:
            try:
                stop()
            except Exception:  # pragma: no cover - best effort teardown
                pass

    def metrics(self) -> list[str]:
        """The statsd lines received so far."""
        lines = []
        while True:
            try:
                data = self.statsd.recv(65536)
            except (socket.timeout, BlockingIOError):
                return lines
            lines.extend(data.decode().splitlines())

    @property
    def scheduler(self):
        """The in-process scheduler (not there when it runs as a process)."""
        if 'scheduler' not in self.in_process:
            raise AttributeError('the scheduler is not in this process: observe it through '
                                 'Gerrit, status(), rpc() or build_history()')
        return self.service.scheduler

    def settle(self, timeout: float = 180.0) -> None:
        assert self.scheduler.wait_until_settled(timeout), 'the scheduler did not settle'

    def verified(self, change) -> int:
        return self.store.get_change(change.number).approval_value('Verified')

    def messages(self, change) -> list[str]:
        """What Zuul posted on the change, oldest first."""
        return [r['message'] for r in self.store.review_log
                if r['change'] == change.number and r['user'] == 'zuul']


@pytest.fixture
def zuul_system(dev_gerrit, zk_chroot, gearman_server, ssh_keypair):
    root = tempfile.mkdtemp(prefix='zs', dir='/tmp')
    system = ZuulSystem(root, dev_gerrit, zk_chroot.hosts, gearman_server.port,
                        ssh_keypair.private_key_path)
    try:
        yield system
    finally:
        system.stop()
        if not os.environ.get('ZUUL_KEEP_JOBDIR'):
            shutil.rmtree(root, ignore_errors=True)
