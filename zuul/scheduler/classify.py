"""Failure classification on the scheduler side.

Each finished build carries ``failure_class``: why it failed when the
infrastructure made it fail, or ``test`` when the job itself failed.

* ``infra:pre-run``, ``infra:unreachable``, ``infra:pattern:<regex>``: the
  executor says so (zuul.executor.infrafailure); such builds come back
  RETRY and run again up to the job's ``attempts`` (RETRY_LIMIT after).
* ``infra:executor-lost``: the executor went away with the build (RETRY).
* ``infra:node-failure``: the node request failed. Released Zuul reports
  NODE_FAILURE at once; with the tenant's ``retry-node-failure: true``
  the nodes are requested again up to ``attempts``.
* ``test``: FAILURE, POST_FAILURE, TIMED_OUT. Never retried.
"""

from __future__ import annotations

from zuul.executor import infrafailure
from zuul.model import item as m

EXECUTOR_LOST = 'infra:executor-lost'
NODE_FAILURE = 'infra:node-failure'
PRE_RUN = infrafailure.PRE_RUN
TEST = infrafailure.TEST

_TEST_RESULTS = (m.FAILURE, 'ERROR', m.POST_FAILURE, m.TIMED_OUT)


def classify_result(result) -> str | None:
    """The class of an executor's BuildResult (None: the executor was
    lost before it sent one)."""
    if result is None or result.result is None:
        return EXECUTOR_LOST
    reported = getattr(result, 'failure_class', None)
    if reported:
        return reported
    if result.result in ('RETRY', 'RETRY_LIMIT'):
        return PRE_RUN      # an executor that does not say why
    if result.result in _TEST_RESULTS:
        return TEST
    return None


def tenant_of(ctx):
    """The Tenant (zuul.model.tenant) behind a scheduler context, if any."""
    state = getattr(ctx, 'tenant', None)
    return getattr(getattr(state, 'layout', None), 'tenant', None)


def retry_node_failure(ctx, bs: m.BuildSet, job: m.JobRef) -> bool:
    """Whether a failed node request for ``job`` is tried again: only
    with the tenant's ``retry-node-failure`` and attempts left (each
    failed request uses one)."""
    tenant = tenant_of(ctx)
    if not getattr(tenant, 'retry_node_failure', False):
        return False
    bs.tries[job.name] = bs.tries.get(job.name, 0) + 1
    return bs.tries[job.name] < max(1, job.attempts)


def infra_failure_patterns(tenant) -> list[str]:
    """The tenant's ``infra-failure-patterns`` (sent with each build)."""
    return list(getattr(tenant, 'infra_failure_patterns', None) or ())
