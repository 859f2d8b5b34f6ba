"""The simulated provider's shared cloud (``state-dir``): what one
launcher's adapter creates, another's sees, polls and deletes."""

from __future__ import annotations

import pytest

from nodepool.config import load_config_text
from nodepool.driver import InstanceSpec, LaunchError
from nodepool.driver.simulated.adapter import SimulatedAdapter


def adapter(state_dir=None, boot_delay=0):
    extra = f'    state-dir: {state_dir}\n' if state_dir else ''
    config = load_config_text(f"""
labels: [{{name: small}}]
providers:
  - name: sim
    driver: simulated
    boot-delay: {boot_delay}
{extra}    pools: [{{name: main, labels: [{{name: small}}]}}]
""")
    return SimulatedAdapter(config.providers['sim'])


def spec(node_id):
    return InstanceSpec(name=f'sim-{node_id}', node_id=node_id, provider='sim', pool='main',
                        label='small', username='zuul')


def test_two_adapters_share_one_cloud(tmp_path):
    one, two = adapter(tmp_path), adapter(tmp_path)
    first = one.create(spec('0000000001'))
    second = two.create(spec('0000000002'))
    assert first != second                        # ids unique across adapters
    assert {i.external_id: i.node_id for i in two.list()} == \
        {first: '0000000001', second: '0000000002'}
    inst = two.poll(first)
    assert inst.ready and inst.username == 'zuul' and inst.interface_ip.startswith('192.0.2.')

    two.hold_boots()                              # held for every adapter
    assert one.poll(second) is None
    one.release_boots()
    assert one.poll(second).ready

    two.delete(first)                             # deleted by the other one
    assert [i.external_id for i in one.list()] == [second]
    with pytest.raises(LaunchError, match='vanished'):
        one.poll(first)
    two.delete(first)                             # deleting twice is fine
    assert two.deleted == [first, first] and one.created == [first]


def test_memory_cloud_is_private_and_boot_delay_applies(tmp_path):
    one, two = adapter(), adapter()
    external_id = one.create(spec('0000000001'))
    assert two.list() == [] and [i.external_id for i in one.list()] == [external_id]
    slow = adapter(tmp_path, boot_delay=3600)
    assert slow.poll(slow.create(spec('0000000002'))) is None


def test_injected_failures(tmp_path):
    cloud = adapter(tmp_path)
    cloud.fail_next_launches(1)
    failing = cloud.create(spec('0000000001'))
    with pytest.raises(LaunchError, match='injected'):
        cloud.poll(failing)
    cloud.fail_next_deletes(1)
    with pytest.raises(LaunchError):
        cloud.delete(failing)
    assert failing in cloud.instances
    cloud.delete(failing)
    assert cloud.instances == {} and cloud.failed_deletes == [failing]
