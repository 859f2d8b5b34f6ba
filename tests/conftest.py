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
