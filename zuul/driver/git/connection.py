"""A plain git connection: projects fetched from ``baseurl/<project>``;
``ref-updated`` events found by polling ``git ls-remote``."""

from __future__ import annotations

import logging
import subprocess
import threading

from zuul.model.change import Ref
from zuul.model.events import TriggerEvent

log = logging.getLogger('zuul.driver.git')

ZERO = '0' * 40


class GitConnection:
    driver_name = 'git'

    def __init__(self, name: str, options: dict):
        self.name = name
        self.baseurl = options['baseurl'].rstrip('/')
        self.poll_delay = int(options.get('poll_delay', 7200))
        self.canonical_hostname = options.get('canonical_hostname') or \
            self.baseurl.split('://', 1)[-1].split('/', 1)[0]
        self.projects: set[str] = set()
        self._refs: dict[str, dict[str, str]] = {}
        self._stop = threading.Event()
        self._thread = None
        self.on_event = None

    def git_url(self, project: str) -> str:
        return f'{self.baseurl}/{project}'

    def watch(self, projects) -> None:
        self.projects.update(projects)

    def ls_remote(self, project: str) -> dict[str, str]:
        out = subprocess.run(['git', 'ls-remote', self.git_url(project)],
                             capture_output=True, text=True, timeout=120)
        if out.returncode:
            raise RuntimeError(f'git ls-remote {self.git_url(project)}: {out.stderr.strip()}')
        refs = {}
        for line in out.stdout.splitlines():
            sha, _, ref = line.partition('\t')
            if ref.startswith(('refs/heads/', 'refs/tags/')) and not ref.endswith('^{}'):
                refs[ref] = sha
        return refs

    def poll_once(self) -> list[TriggerEvent]:
        """Compare every watched project's refs with the last poll."""
        events = []
        for project in sorted(self.projects):
            try:
                current = self.ls_remote(project)
            except Exception as e:
                log.warning('Polling %s failed: %s', project, e)
                continue
            previous = self._refs.get(project)
            self._refs[project] = current
            if previous is None:
                continue  # first look: nothing to compare with
            for ref in sorted(set(previous) | set(current)):
                old, new = previous.get(ref, ZERO), current.get(ref, ZERO)
                if old != new:
                    events.append(TriggerEvent(
                        type='ref-updated', connection=self.name, project=project, ref=ref,
                        oldrev=old, newrev=new,
                        branch=ref[len('refs/heads/'):] if ref.startswith('refs/heads/')
                        else None))
        return events

    def start(self, on_event) -> None:
        self.on_event = on_event
        self._thread = threading.Thread(target=self._run, name=f'git-poll-{self.name}',
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for event in self.poll_once():
                self.on_event(event)
            self._stop.wait(self.poll_delay)

    def stop(self) -> None:
        self._stop.set()

    def get_change_for_event(self, event):
        return Ref(self.name, event.project, event.ref or '', event.oldrev, event.newrev)

    def get_needed_changes(self, change, connections):
        return []

    def is_merged(self, change) -> bool:
        return False
