"""Seed 001's node and image objects, read-only: zuul-web's
/api/tenant/<t>/images, /flavors, /labels, /providers, the ``zuul``
flavor-list / label-list / provider-list verbs, and the scheduler's RPC
handlers that serve them from the live layout."""

from __future__ import annotations

import json
import types

import pytest

from tests.fakes.scheduler_rpc import launcher_layouts
from tests.unit.test_cli import run  # noqa: F401  (fixture)
from tests.unit.test_web_api import error_of, get
from zuul.lib import rpc_protocol as p
from zuul.scheduler import rpc_handlers

T1 = '/api/tenant/tenant-one'


def test_images_flavors_labels(zuul_web):
    assert get(zuul_web, f'{T1}/images') == (200, [{
        'name': 'debian', 'canonical_name': 'review.example.com/common-config/debian',
        'description': 'Stock Debian', 'type': 'cloud',
        'source_context': {'project': 'common-config', 'branch': 'master',
                           'path': 'zuul.d/nodes.yaml'}}])
    _, flavors = get(zuul_web, f'{T1}/flavors')
    assert [f['name'] for f in flavors] == ['small']
    _, labels = get(zuul_web, f'{T1}/labels')
    assert [(lb['name'], lb['image'], lb['flavor'], lb['min_ready']) for lb in labels] == [
        ('debian-small', 'debian', 'small', 2)]


def test_providers_show_references_but_no_settings(zuul_web):
    status, providers = get(zuul_web, f'{T1}/providers')
    assert status == 200
    [prv] = providers
    assert (prv['name'], prv['section'], prv['connection'], prv['labels'], prv['images']) == (
        'cloud-one-main', 'cloud-one', 'cloud', ['debian-small'], ['debian'])
    text = json.dumps(providers)
    assert 'secret-ish-key-name' not in text and 'm1.small' not in text


def test_a_tenant_without_objects_has_empty_lists(zuul_web):
    for what in ('images', 'flavors', 'labels', 'providers'):
        assert get(zuul_web, f'/api/tenant/tenant-two/{what}') == (200, [])


@pytest.mark.parametrize('what', ['images', 'flavors', 'labels', 'providers'])
def test_unknown_tenant_and_parameters(zuul_web, what):
    assert error_of(zuul_web, f'/api/tenant/nope/{what}', 404) == 'Unknown tenant nope'
    assert 'unexpected parameter' in error_of(zuul_web, f'{T1}/{what}?x=1', 400)


def test_cli_lists(run, fake_scheduler):  # noqa: F811
    code, out, err = run('label-list', '--tenant', 'tenant-one')
    assert (code, err) == (0, '')
    lines = out.splitlines()
    assert lines[0].split() == ['Name', 'Image', 'Flavor', 'Min', 'ready', 'Canonical',
                                'name']
    assert lines[1].split() == ['debian-small', 'debian', 'small', '2',
                                'review.example.com/common-config/debian-small']
    assert fake_scheduler.calls[-1][0] == p.LAUNCHER_LABEL_LIST
    code, out, _ = run('provider-list', '--tenant', 'tenant-one')
    assert out.splitlines()[1].split()[:4] == ['cloud-one-main', 'cloud-one', 'cloud',
                                               'debian-small']
    code, out, _ = run('flavor-list', '--tenant', 'tenant-one')
    assert out.splitlines()[1].split()[0] == 'small'


def test_cli_unknown_tenant(run):  # noqa: F811
    code, out, err = run('provider-list', '--tenant', 'nope')
    assert (code, out, err) == (1, '', 'zuul: error: Unknown tenant nope\n')


def test_scheduler_handlers_read_the_live_layout():
    layout = launcher_layouts()['tenant-one']

    class Scheduler:
        def get_tenant(self, name):
            if name != 'tenant-one':
                raise p.RPCError(f'Unknown tenant {name}')
            return types.SimpleNamespace(layout=layout)

    table = rpc_handlers.handlers(Scheduler(), layouts=None)
    request = p.RPCRequest(tenant='tenant-one')
    assert [e['name'] for e in table[p.LAUNCHER_PROVIDER_LIST](request)] == ['cloud-one-main']
    assert [e['type'] for e in table[p.LAUNCHER_IMAGE_LIST](request)] == ['cloud']
    with pytest.raises(p.RPCError):
        table[p.LAUNCHER_LABEL_LIST](p.RPCRequest(tenant='nope'))
