"""Test harness wiring: real services as fixtures (see tests/harness/)."""

pytest_plugins = [
    'tests.harness.corpus',
    'tests.harness.zookeeper',
    'tests.harness.gearman',
    'tests.fakes.gerrit',
    'tests.harness.nodes',
    'tests.fakes.scheduler_rpc',
    'tests.harness.browser',
]


# -- a run that has finished exits -------------------------------------------
# A ZooKeeper client left behind by a test (its servers gone) can block
# the interpreter's shutdown for ever (kazoo's handler joins a watch
# callback waiting on a server that is gone). Once the session is over
# and reported, the process ends with the session's status; what was
# still running is named, so that a leak stays visible.
_status = {'code': 0}


def pytest_sessionfinish(session, exitstatus):
    _status['code'] = int(exitstatus)


def pytest_unconfigure(config):
    import os
    import sys
    import threading
    if config.option.collectonly or hasattr(config, 'workerinput'):
        return
    left = sorted(t.name for t in threading.enumerate()
                  if t is not threading.current_thread() and not t.daemon)
    if left:
        print(f'pytest: {len(left)} non-daemon threads left by the tests: '
              f'{", ".join(left[:40])}', file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_status['code'])
