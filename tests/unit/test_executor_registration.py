"""What an executor registers with Gearman follows its latest decision
(issue 29): the governor, the job loop and build threads re-register
concurrently, and one that decided earlier must not send after one that
decided later (the executor stayed unregistered for builds, with one
queued, until its load changed again)."""

from __future__ import annotations

import threading

from zuul.executor.protocol import FUNCTION_EXECUTE
from zuul.executor.server import ExecutorServer
from zuul.executor.settings import ExecutorSettings


class _Governor:
    def __init__(self):
        self.accept = False
        self.reason = None

    def accepting(self, running, starting=0):
        self.reason = None if self.accept else 'job limit reached'
        return self.accept


class _Worker:
    """Records setFunctions; the first call, while still being sent,
    lets a later decision happen (``during_first``)."""

    def __init__(self):
        self.sent: list[list[str]] = []
        self.during_first = None

    def setFunctions(self, functions):  # noqa: N802 - gear API
        names = sorted(f.name.decode() for f in functions)
        if self.during_first is not None:
            later, self.during_first = self.during_first, None
            later()
        self.sent.append(names)

    def stopWaitingForJobs(self):  # noqa: N802 - gear API
        pass


def test_a_later_decision_is_the_one_registered(tmp_path):
    settings = ExecutorSettings(hostname='ex.example.org', job_dir=str(tmp_path / 'b'),
                                state_dir=str(tmp_path / 's'), sandbox_untrusted=False)
    governor = _Governor()
    server = ExecutorServer(settings, '127.0.0.1', 1, merger=None, governor=governor)
    server.worker = worker = _Worker()
    server._running = True
    server._registered_execute = True

    def build_ended():
        # A build ends while the governor's "not accepting" is being
        # sent: the executor can take builds again.
        governor.accept = True
        thread = threading.Thread(target=server._update_registration)
        thread.start()
        # Serialized, the later call waits for the first to be sent.
        thread.join(1.0)
        threads.append(thread)
    threads: list = []
    worker.during_first = build_ended
    server._update_registration()       # the governor: job limit reached
    for thread in threads:
        thread.join(10)
    assert FUNCTION_EXECUTE in worker.sent[-1], worker.sent
    assert server.accepting_work
