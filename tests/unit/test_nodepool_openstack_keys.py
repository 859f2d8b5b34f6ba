"""The openstack provider's keys of issue 17, as configuration:
``clean-floating-ips``/``port-cleanup-interval`` defaults, the
deprecated ``nodepool-id``, and ``dynamic-instance-properties``
templates checked at load time and formatted per request."""

from __future__ import annotations

import logging

import pytest

from nodepool.config import ConfigError, load_config_text
from nodepool.driver.openstack.adapter import dynamic_properties

BASE = """
labels: [{{name: small}}]
providers:
  - name: cloud1
    cloud: fake
    {provider_extra}
    cloud-images: [{{name: cirros}}]
    pools:
      - name: main
        labels:
          - name: small
            cloud-image: cirros
            min-ram: 1
            {label_extra}
"""


def load(provider_extra='', label_extra=''):
    return load_config_text(BASE.format(provider_extra=provider_extra,
                                        label_extra=label_extra))


def test_cleanup_defaults_follow_released_nodepool():
    settings = load().providers['cloud1'].settings
    assert settings['clean-floating-ips'] is True
    assert settings['port-cleanup-interval'] == 600
    settings = load('clean-floating-ips: false\n    port-cleanup-interval: 0').providers[
        'cloud1'].settings
    assert settings['clean-floating-ips'] is False and settings['port-cleanup-interval'] == 0


def test_nodepool_id_is_deprecated_and_warned_about():
    config = load('nodepool-id: prod')
    [warning] = config.warnings
    assert 'nodepool-id is deprecated' in warning.message and 'no effect' in warning.message
    assert warning.line == 6
    assert load().warnings == []


def test_dynamic_instance_property_templates_are_checked_at_load():
    good = load(label_extra='dynamic-instance-properties: {a: "{request.id}", '
                            'b: "{request.requestor_data[x]}", c: "{request.labels[0]}"}')
    assert good.providers['cloud1'].pools['main'].labels['small'].settings[
        'dynamic-instance-properties']['b'] == '{request.requestor_data[x]}'
    for bad in ('"{request.nope}"', '"{node.id}"', '"{request.id"'):
        with pytest.raises(ConfigError) as e:
            load(label_extra=f'dynamic-instance-properties: {{a: {bad}}}')
        assert 'dynamic-instance-properties' in str(e.value)
        assert 'cannot format' in str(e.value)


def test_dynamic_properties_are_formatted_from_the_request(caplog):
    request = {'id': '100-0000000007', 'labels': ['small', 'big'], 'requestor': 'zuul',
               'requestor_data': {'job': 'tox'}, 'relative_priority': 2, 'event_id': 'e1',
               'created_time': 1.5, 'tenant_name': 'acme'}
    templates = {'r': 'for {request.id}', 'l': '{request.labels[1]}',
                 'j': '{request.requestor_data[job]}', 'p': '{request.relative_priority}',
                 't': '{request.tenant_name}/{request.event_id}', 'gone': '{request.labels[5]}'}
    with caplog.at_level(logging.WARNING):
        out = dynamic_properties(templates, request, '0001')
    assert out == {'r': 'for 100-0000000007', 'l': 'big', 'j': 'tox', 'p': '2',
                   't': 'acme/e1'}
    assert 'gone' in caplog.text
    # A launch no request prompted: the properties are left out.
    assert dynamic_properties({'r': '{request.id}'}, None, '0002') == {}
