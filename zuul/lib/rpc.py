"""The scheduler's Gearman RPC listener and the client the CLI and web use."""

from __future__ import annotations

import logging
import threading

import gear

from zuul.lib import rpc_protocol as p
from zuul.lib.gearlib import GearClient, GearWorker, tls_kwargs

log = logging.getLogger('zuul.lib.rpc')


class RPCListener:
    """Serves ``zuul:*`` functions by calling ``handlers[function](request)``
    (handlers run on the listener thread; those touching pipeline state go
    through the scheduler's management queue)."""

    def __init__(self, host: str, port: int, handlers: dict, name: str = 'zuul-rpc',
                 tls=None):
        self.handlers = handlers
        self.worker = GearWorker(name)
        self.worker.addServer(host, port, **tls_kwargs(tls))
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._running = False

    def start(self) -> None:
        self._running = True
        self.worker.waitForServer()
        for name in self.handlers:
            self.worker.registerFunction(name)
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        self.worker.stopWaitingForJobs()
        self.worker.shutdown()
        self._thread.join(10)

    def _run(self) -> None:
        while self._running:
            try:
                job = self.worker.getJob()
            except gear.InterruptedError:
                continue
            except Exception:
                if self._running:
                    log.exception('RPC listener error')
                continue
            try:
                self._handle(job)
            except Exception:  # keep listening whatever happened to this call
                log.exception('RPC %s failed', job.name)

    def _handle(self, job) -> None:
        try:
            request = p.RPCRequest.from_json(job.arguments)
            result = self.handlers[job.name](request)
            response = p.RPCResponse(ok=True, result=result)
        except p.RPCVersionError as e:
            response = p.RPCResponse(ok=False, error=str(e))
        except (LookupError, ValueError, p.RPCError) as e:
            response = p.RPCResponse(ok=False, error=_message(e))
        except Exception as e:
            log.exception('RPC %s failed', job.name)
            response = p.RPCResponse(ok=False, error=f'internal error: {e}')
        job.sendWorkComplete(response.to_json().encode())


def _message(e: Exception) -> str:
    # KeyError's str() adds quotes; LookupErrors here carry a sentence.
    return e.args[0] if e.args and isinstance(e.args[0], str) else str(e)


class _SignalingClient(GearClient):
    """Sets ``job.done_event`` when a job completes or fails."""

    def handleWorkComplete(self, packet):  # noqa: N802 - gear API
        job = super().handleWorkComplete(packet)
        _signal(job)
        return job

    def handleWorkFail(self, packet):  # noqa: N802 - gear API
        job = super().handleWorkFail(packet)
        _signal(job)
        return job

    def handleWorkException(self, packet):  # noqa: N802 - gear API
        job = super().handleWorkException(packet)
        _signal(job)
        return job

    def handleDisconnect(self, job):  # noqa: N802 - gear API
        job = super().handleDisconnect(job)
        job.disconnected = True
        _signal(job)
        return job


def _signal(job):
    event = getattr(job, 'done_event', None)
    if event is not None:
        event.set()


class RPCClient:
    """Blocking calls to the scheduler over Gearman.

    A call waits (up to ``connect_timeout``) for a Gearman server when the
    connection is down (gear reconnects by itself, e.g. after a server
    restart).  A call whose connection is lost before the answer is not
    repeated (it may have been carried out): it raises RPCError."""

    def __init__(self, host: str, port: int, timeout: float = 300.0, name: str = 'zuul-client',
                 tls=None, connect_timeout: float = 30.0):
        self.client = _SignalingClient(name)
        self.client.addServer(host, port, **tls_kwargs(tls))
        self.client.waitForServer(timeout=connect_timeout)
        self.timeout = timeout
        self.connect_timeout = connect_timeout

    def call(self, function: str, request: p.RPCRequest | None = None):
        request = request or p.RPCRequest()
        job = gear.TextJob(function, request.to_json())
        done = threading.Event()
        job.done_event = done
        try:
            self.client.waitForServer(timeout=self.connect_timeout)
            self.client.submitJob(job, timeout=30)
        except gear.TimeoutError:
            raise p.RPCError(f'{function}: no Gearman server connected within '
                             f'{self.connect_timeout:.0f}s') from None
        except (gear.GearmanError, gear.NoConnectedServersError) as e:
            raise p.RPCError(f'{function}: unable to submit to Gearman: {e}') from None
        if not done.wait(self.timeout):
            raise TimeoutError(f'{function}: no answer from the scheduler within '
                               f'{self.timeout}s')
        if getattr(job, 'disconnected', False):
            raise p.RPCError(f'{function}: lost the connection to the Gearman server before '
                             'the scheduler answered (the request may have been carried '
                             'out)')
        if job.failure or not job.data:
            raise p.RPCError(f'{function}: the scheduler did not complete the request '
                             '(is zuul-scheduler running?)')
        response = p.RPCResponse.from_json(job.data[-1])
        if not response.ok:
            raise p.RPCError(response.error)
        return response.result

    def shutdown(self) -> None:
        self.client.shutdown()

