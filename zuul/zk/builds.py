"""Build records in ZooKeeper: what an executor is running and what it
finished, independent of the Gearman connection that launched it.

- ``/zuul/executors/<hostname>`` (ephemeral): an executor is alive.
- ``/zuul/builds/<uuid>`` (persistent JSON): ``{"state": "running",
  "executor": host, "url": live-log URL, "time": t}`` when a build starts,
  then ``{"state": "completed", "executor": host, "result": <BuildResult
  JSON>}`` when it ends -- written *before* WORK_COMPLETE, so a scheduler
  that restarted (or lost its Gearman connection) still learns the result.

The scheduler deletes a record once it has applied the result. A record
whose build is ``running`` and whose executor node is gone belongs to a
build that was lost: the scheduler retries it (counted as an attempt).
"""

from __future__ import annotations

import json
import logging
import threading
import time

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

log = logging.getLogger('zuul.zk.builds')

BUILD_ROOT = '/zuul/builds'
EXECUTOR_ROOT = '/zuul/executors'
RUNNING = 'running'
COMPLETED = 'completed'


class BuildRecords:
    def __init__(self, client):
        self.client = client
        self._hostname: str | None = None
        self._listening = False

    # -- executor side -------------------------------------------------

    def register_executor(self, hostname: str, zone: str | None = None,
                          allow_unzoned: bool = False) -> None:
        """The ephemeral liveness node (holding the executor's zone);
        re-created after a session loss."""
        self._hostname = hostname
        self._liveness = json.dumps({'zone': zone, 'allow_unzoned': allow_unzoned}).encode()
        self._create_liveness()
        if not self._listening:
            self._listening = True
            self.client.add_listener(self._on_state)

    def unregister_executor(self) -> None:
        hostname, self._hostname = self._hostname, None
        if hostname:
            try:
                self.client.delete(f'{EXECUTOR_ROOT}/{hostname}')
            except Exception:
                pass

    def _on_state(self, state) -> None:
        if state == KazooState.CONNECTED and self._hostname:
            # After an expired session the ephemeral node is gone.
            threading.Thread(target=self._create_liveness, daemon=True).start()

    def _create_liveness(self) -> None:
        hostname = self._hostname
        if not hostname:
            return
        try:
            self.client.create(f'{EXECUTOR_ROOT}/{hostname}',
                               getattr(self, '_liveness', b'{}'), ephemeral=True,
                               makepath=True)
        except NodeExistsError:
            pass
        except Exception:
            log.exception('Unable to register executor %s in ZooKeeper', hostname)

    def executor_zones(self) -> set:
        """Zones with an executor up: each live executor's ``zone`` (None
        for an unzoned one, and for one that also takes unzoned builds)."""
        zones: set = set()
        try:
            hostnames = self.client.get_children(EXECUTOR_ROOT)
        except NoNodeError:
            return zones
        for hostname in hostnames:
            try:
                data, _ = self.client.get(f'{EXECUTOR_ROOT}/{hostname}')
                info = json.loads(data or b'{}')
            except (NoNodeError, ValueError):
                continue
            zone = info.get('zone') if isinstance(info, dict) else None
            zones.add(zone)
            if zone and info.get('allow_unzoned'):
                zones.add(None)
        return zones

    def started(self, uuid: str, hostname: str, url: str | None) -> None:
        self._write(uuid, {'state': RUNNING, 'executor': hostname, 'url': url,
                           'time': time.time()})

    def completed(self, uuid: str, hostname: str, result_json: bytes | str) -> None:
        if isinstance(result_json, bytes):
            result_json = result_json.decode('utf8')
        self._write(uuid, {'state': COMPLETED, 'executor': hostname,
                           'result': json.loads(result_json), 'time': time.time()})

    def _write(self, uuid: str, record: dict) -> None:
        data = json.dumps(record).encode('utf8')
        path = f'{BUILD_ROOT}/{uuid}'
        for _ in range(3):
            try:
                try:
                    self.client.set(path, data)
                except NoNodeError:
                    self.client.create(path, data, makepath=True)
                return
            except NodeExistsError:
                continue
            except Exception:
                log.exception('Unable to record build %s in ZooKeeper', uuid)
                return

    # -- scheduler side ------------------------------------------------

    def get(self, uuid: str) -> dict | None:
        try:
            data, _ = self.client.get(f'{BUILD_ROOT}/{uuid}')
        except NoNodeError:
            return None
        try:
            return json.loads(data.decode('utf8'))
        except ValueError:
            return None

    def executor_alive(self, hostname: str | None) -> bool:
        if not hostname:
            return False
        return self.client.exists(f'{EXECUTOR_ROOT}/{hostname}') is not None

    def delete(self, uuid: str, wait: bool = True) -> None:
        """Not ``wait``: sent, not waited for (a failure is logged)."""
        if not wait:
            pending = self.client.delete_async(f'{BUILD_ROOT}/{uuid}')

            def done(result):
                try:
                    result.get()
                except NoNodeError:
                    pass
                except Exception as exc:
                    log.warning('Unable to delete the record of build %s: %s', uuid, exc)
            pending.rawlink(done)
            return
        try:
            self.client.delete(f'{BUILD_ROOT}/{uuid}')
        except NoNodeError:
            pass
        except Exception:
            log.exception('Unable to delete the record of build %s', uuid)

    def uuids(self) -> list[str]:
        try:
            return self.client.get_children(BUILD_ROOT)
        except NoNodeError:
            return []

    def follow(self, uuid: str, on_done) -> None:
        """Call ``on_done(record_or_None)`` once: with the completed record
        when the build ends, or None when its executor is gone first."""
        once = threading.Lock()
        fired = []

        def fire(record):
            with once:
                if fired:
                    return
                fired.append(True)
            on_done(record)

        def check(*_):
            if fired:
                return False
            record = self.get(uuid)
            if record is not None and record.get('state') == COMPLETED:
                fire(record)
                return False
            host = (record or {}).get('executor')
            if record is None or not self.executor_alive(host):
                fire(None)
                return False
            return True

        def on_build(data, stat, event=None):
            if fired:
                return False
            return check()

        def on_executor(data, stat, event=None):
            if fired:
                return False
            if stat is None:
                return check()
            return True
        if check() is False:
            return
        record = self.get(uuid) or {}
        self.client.DataWatch(f'{BUILD_ROOT}/{uuid}', on_build)
        self.client.DataWatch(f'{EXECUTOR_ROOT}/{record.get("executor")}', on_executor)
