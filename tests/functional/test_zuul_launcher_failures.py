"""Temporary and permanent launch failures (seed 001): a provider that
cannot launch a node for now (quota, boot timeout, an API error) does
not fail the request; only every capable provider failing the node
permanently does.  Real ZooKeeper, fault-injecting adapters."""

from __future__ import annotations

import json
import threading

import pytest

from nodepool.driver import DriverRegistry, LaunchError, ProviderError, QuotaError
from nodepool.driver.simulated.adapter import SimulatedAdapter
from nodepool.driver.simulated.driver import SimulatedDriver
from nodepool.zk.records import FAILED, NodeRequest
from tests.functional import test_zuul_launcher_support as support
from tests.functional.test_zuul_launcher_support import (
    canonical,
    provider,
    publish_providers,
    zuul_zk,
)
from tests.harness.waiting import wait_for
from zuul.launcher import assign, provider_loop
from zuul.launcher.node_machine import (
    PERMANENT,
    QUOTA,
    TEMPORARY,
    BootTimeoutError,
    failure_kind,
)
from zuul.launcher.provider_loop import provider_state_path

launchers = support.launchers
requestor = support.requestor

UBUNTU = canonical('ubuntu')


class ScriptedAdapter(SimulatedAdapter):
    """``create`` raises the next planned error of its provider (a list
    per provider canonical name; None or an empty list: it launches)."""

    def create(self, spec):
        with ScriptedDriver.lock:
            ScriptedDriver.creates.append(self.provider.name)
            plan = ScriptedDriver.plan.get(self.provider.name)
            error = plan.pop(0) if plan else None
        if error is not None:
            raise error
        return super().create(spec)


class ScriptedDriver(SimulatedDriver):
    plan: dict = {}
    creates: list = []
    lock = threading.Lock()

    def get_adapter(self, provider):
        return ScriptedAdapter(provider)


@pytest.fixture
def scripted():
    ScriptedDriver.plan = {}
    ScriptedDriver.creates = []
    yield ScriptedDriver
    ScriptedDriver.plan = {}


def registry() -> DriverRegistry:
    return DriverRegistry([ScriptedDriver()])


def two_providers(**extra):
    a = provider('sim-a', ['ubuntu'], connection='a',
                 settings={'priority': 1, 'launch-attempts': 2, **extra.get('a', {})})
    b = provider('sim-b', ['ubuntu'], connection='b',
                 settings={'priority': 2, 'launch-attempts': 2, **extra.get('b', {})})
    return a, b


CONNS = {'a': {'driver': 'simulated'}, 'b': {'driver': 'simulated'}}


def _request_record(zk_client, request_id):
    raw, stat = zk_client.get(f'/zuul/node-requests/{request_id}')
    return NodeRequest.deserialize(raw, id=request_id, stat=stat)


def test_failure_kinds():
    assert failure_kind(QuotaError('over quota')) == QUOTA
    assert failure_kind(LaunchError('no such flavor')) == PERMANENT
    assert failure_kind(BootTimeoutError('not ready within 60s')) == TEMPORARY
    assert failure_kind(ProviderError('API returned 503')) == TEMPORARY
    assert failure_kind(ConnectionResetError()) == TEMPORARY


def test_temporary_failures_in_every_provider_are_cleared_and_the_node_retried(
        zk_client, launchers, requestor, scripted, caplog):
    a, b = two_providers()
    publish_providers(zk_client, a, b)
    # Both providers fail both attempts with an API error, then A works.
    scripted.plan = {a.canonical_name: [ProviderError('API 503')] * 2,
                     b.canonical_name: [ProviderError('API 503')] * 2}
    launchers(CONNS, registry=registry())
    caplog.set_level('INFO', logger='zuul.launcher')
    handle = requestor.submit([UBUNTU])
    assert handle.wait(20)
    assert handle.fulfilled
    assert handle.nodes[0].provider == a.canonical_name
    assert scripted.creates == [a.canonical_name] * 2 + [b.canonical_name] * 2 + \
        [a.canonical_name]
    assert 'every provider failed node 0' in caplog.text
    requestor.release(handle)


def test_a_temporary_failure_moves_the_node_and_is_recorded_apart(
        zk_client, launchers, requestor, scripted):
    a, b = two_providers()
    publish_providers(zk_client, a, b)
    scripted.plan = {a.canonical_name: [ProviderError('API 503')] * 2}
    launcher = launchers(CONNS, registry=registry())
    # Hold B's boots so the request is still open when we look at it.
    launcher.adapter_for(b.canonical_name).hold_boots()
    handle = requestor.submit([UBUNTU])
    zk = zuul_zk(zk_client)
    wait_for(lambda: any(n.provider == b.canonical_name for n in zk.get_nodes()),
             timeout=20, what='node moved to B')
    record = _request_record(zk_client, handle.id)
    assert record.node_temp_failures == {'0': [a.canonical_name]}
    assert record.node_declines == {}
    launcher.adapter_for(b.canonical_name).release_boots()
    assert handle.wait(20) and handle.fulfilled
    assert handle.nodes[0].provider == b.canonical_name
    requestor.release(handle)


def test_permanent_and_temporary_failures_keep_the_request_open(
        zk_client, launchers, requestor, scripted, monkeypatch):
    monkeypatch.setattr(assign, 'TEMP_RETRY_DELAY', 0.5)
    a, b = two_providers()
    publish_providers(zk_client, a, b)
    # A declines for good; B fails temporarily twice over (4 creates), then works.
    scripted.plan = {a.canonical_name: [LaunchError('no such flavor')] * 10,
                     b.canonical_name: [ProviderError('API 503')] * 4}
    launchers(CONNS, registry=registry())
    handle = requestor.submit([UBUNTU])
    assert handle.wait(30)
    assert handle.fulfilled
    assert handle.nodes[0].provider == b.canonical_name
    # A was tried once (2 attempts) only: its decline is permanent.
    assert scripted.creates.count(a.canonical_name) == 2
    assert scripted.creates.count(b.canonical_name) == 5
    requestor.release(handle)


def test_request_fails_only_when_every_provider_failed_permanently(
        zk_client, launchers, requestor, scripted):
    a, b = two_providers()
    publish_providers(zk_client, a, b)
    scripted.plan = {a.canonical_name: [LaunchError('bad image')] * 10,
                     b.canonical_name: [ProviderError('API 503')] * 2 +
                     [LaunchError('bad image')] * 10}
    launchers(CONNS, registry=registry())
    handle = requestor.submit([UBUNTU])
    assert handle.wait(30)
    assert handle.failed
    # B failed temporarily first (retried after clearing), then for good.
    assert scripted.creates.count(b.canonical_name) == 4
    assert scripted.creates.count(a.canonical_name) == 2


def test_a_boot_timeout_is_temporary(zk_client, launchers, requestor, scripted):
    a, b = two_providers(a={'boot-timeout': 0.3, 'launch-attempts': 1,
                            'boot-delay': 600})
    publish_providers(zk_client, a, b)
    launchers(CONNS, registry=registry())
    handle = requestor.submit([UBUNTU])
    assert handle.wait(20) and handle.fulfilled
    assert handle.nodes[0].provider == b.canonical_name
    assert scripted.creates == [a.canonical_name, b.canonical_name]
    requestor.release(handle)


def test_quota_error_pauses_the_provider_and_the_node_goes_elsewhere(
        zk_client, launchers, requestor, scripted, monkeypatch):
    monkeypatch.setattr(provider_loop, 'QUOTA_PAUSE', 600.0)
    a, b = two_providers()
    publish_providers(zk_client, a, b)
    scripted.plan = {a.canonical_name: [QuotaError('quota exceeded for instances')]}
    launcher = launchers(CONNS, registry=registry())
    handle = requestor.submit([UBUNTU])
    assert handle.wait(20) and handle.fulfilled
    assert handle.nodes[0].provider == b.canonical_name
    # No second attempt in A: a quota error gives the node up at once.
    assert scripted.creates.count(a.canonical_name) == 1

    def state():
        raw, _ = zk_client.get(provider_state_path(a.canonical_name))
        return json.loads(raw)
    wait_for(lambda: state()['paused'], timeout=10, what='A paused in ZooKeeper')
    assert state()['reason'] == 'quota-error'
    assert launcher.provider_paused(a.canonical_name)
    # While A is paused, new nodes go to B although A comes first.
    second = requestor.submit([UBUNTU])
    assert second.wait(20) and second.fulfilled
    assert second.nodes[0].provider == b.canonical_name
    requestor.release(second)
    requestor.release(handle)


def test_a_quota_paused_provider_unpauses_when_its_quota_frees_up(
        zk_client, launchers, requestor, scripted, monkeypatch):
    monkeypatch.setattr(provider_loop, 'QUOTA_PAUSE', 600.0)
    only = provider('sim-a', ['ubuntu'], connection='a', settings={'launch-attempts': 2})
    publish_providers(zk_client, only)
    launcher = launchers(CONNS, registry=registry())
    first = requestor.submit([UBUNTU])
    assert first.wait(20) and first.fulfilled
    scripted.plan = {only.canonical_name: [QuotaError('quota exceeded')]}
    second = requestor.submit([UBUNTU])

    def state():
        raw, _ = zk_client.get(provider_state_path(only.canonical_name))
        return json.loads(raw)
    # The only provider failed it temporarily: the failure is cleared and
    # the node waits, queued, in the paused provider (the request stays open).
    wait_for(lambda: state()['paused'], timeout=10, what='paused')
    zk = zuul_zk(zk_client)
    wait_for(lambda: [n.launch_state for n in zk.get_nodes()
                      if n.allocated_to == second.id] == ['queued'],
             timeout=10, what='node queued in the paused provider')
    assert not second.wait(0.5)
    assert _request_record(zk_client, second.id).state != FAILED
    # A node of the provider goes away: quota is free again.
    requestor.release(first)
    assert second.wait(20) and second.fulfilled
    assert second.nodes[0].provider == only.canonical_name
    wait_for(lambda: not state()['paused'], timeout=10, what='unpaused')
    assert not launcher.provider_paused(only.canonical_name)
    requestor.release(second)


def test_temporary_failures_of_a_node_are_not_cleared_twice_in_a_row_at_once(
        zk_client, launchers, requestor, scripted, monkeypatch):
    monkeypatch.setattr(assign, 'TEMP_RETRY_DELAY', 2.0)
    only = provider('sim-a', ['ubuntu'], connection='a', settings={'launch-attempts': 1})
    publish_providers(zk_client, only)
    # The provider's API is down for three attempts.
    scripted.plan = {only.canonical_name: [ProviderError('API down')] * 3}
    launchers(CONNS, registry=registry())
    handle = requestor.submit([UBUNTU])
    wait_for(lambda: len(scripted.creates) >= 2, timeout=10, what='second attempt')
    # After the first clearing the node is tried again at once; after the
    # second failure it waits for the retry delay.
    assert not handle.wait(1.0)
    assert len(scripted.creates) == 2
    assert handle.wait(20) and handle.fulfilled
    assert len(scripted.creates) == 4
    requestor.release(handle)
