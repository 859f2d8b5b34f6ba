"""The tenant's ``retry-node-failure`` end to end (doc/source/reference/
waste.rst): the scheduler requests nodes from a real nodepool-launcher
over ZooKeeper; a label no provider has fails every request. Released
behaviour (the default) is one request and NODE_FAILURE; with the key the
nodes are requested again up to the job's ``attempts`` and every attempt
is in the build history, classed ``infra:node-failure``."""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.functional.test_e2e_multinode import launcher  # noqa: F401 - fixture
from tests.harness.waiting import wait_for

TENANT = """
- tenant:
    name: example
    retry-node-failure: {retry}
    source:
      gerrit:
        config-projects:
          - org/project-config
        untrusted-projects:
          - org/app
          - org/lib
"""

APP = """
- job:
    name: no-nodes-for-me
    attempts: 2
    nodeset:
      nodes:
        - name: node
          label: no-such-label
    run: playbooks/never.yaml
- project:
    check:
      jobs:
        - no-nodes-for-me
"""


@pytest.mark.parametrize('retry,requests', [(False, 1), (True, 2)])
def test_failed_node_requests_retry_only_when_the_tenant_asks(
        zuul_system, launcher, retry, requests):  # noqa: F811
    system = zuul_system
    with open(os.path.join(system.root, 'main.yaml'), 'w') as f:
        f.write(textwrap.dedent(TENANT.format(retry='true' if retry else 'false')))
    system.create_projects(app_config=APP)
    system.start()
    change = system.store.create_change('org/app', 'master', 'Needs nodes', {'x.txt': '1\n'})
    wait_for(lambda: system.verified(change) == -1, timeout=300, what='the check vote')
    system.settle()
    report = system.messages(change)[-1]
    assert 'no-nodes-for-me' in report and 'NODE_FAILURE' in report
    assert not system.launches                  # nothing ever ran
    rows = system.build_history(job_name='no-nodes-for-me')
    assert sorted((r['result'], r['failure_class'], r['final']) for r in rows) == sorted(
        [('NODE_FAILURE', 'infra:node-failure', False)] * (requests - 1) +
        [('NODE_FAILURE', 'infra:node-failure', True)])
