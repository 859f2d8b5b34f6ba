"""doc/source/operations/web-auth.rst: its zuul.conf and tenant file
examples load as printed, and its example token is judged as the page
says."""

from __future__ import annotations

import json

from tests.harness.docs import code_blocks
from zuul.configloader.tenant import load_tenant_config
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.lib import authz
from zuul.web.access import AccessPolicy, Caller

PAGE = 'doc/source/operations/web-auth.rst'


def test_the_zuul_conf_examples_load(tmp_path):
    (tmp_path / 'keys').mkdir()
    for name in ('zuul-web.pub', 'zuul-web.key'):
        (tmp_path / 'keys' / name).write_text('')
    blocks = code_blocks(PAGE, 'ini')
    assert len(blocks) == 2
    path = tmp_path / 'zuul.conf'
    path.write_text('\n'.join(blocks))
    auth = load_zuul_conf(str(path)).auth
    assert sorted(auth) == ['keycloak', 'signing', 'zuul_operator']
    assert auth['zuul_operator'].allow_authz_override and auth['zuul_operator'].default
    assert auth['keycloak'].uid_claim == 'preferred_username'
    assert auth['signing'].public_key == str(tmp_path / 'keys' / 'zuul-web.pub')


def _tenant_file(tmp_path):
    (yaml_text,) = code_blocks(PAGE, 'yaml')
    path = tmp_path / 'main.yaml'
    path.write_text(yaml_text)
    result = load_tenant_config(str(path), {'gerrit'})
    assert result.errors == [] and result.warnings == []
    return result


def test_the_tenant_file_example_loads_and_the_token_is_judged_as_described(tmp_path):
    result = _tenant_file(tmp_path)
    assert result.tenants['tenant-two'].access_rules == ['tenant_group']
    assert result.api_root['authentication_realm'] == 'zuul.example.com'
    rules = {'rules': result.admin_rules, 'tenants': {
        name: {'admin_rules': t.admin_rules, 'access_rules': t.access_rules,
               'authentication_realm': t.authentication_realm}
        for name, t in result.tenants.items()}}
    (token_text,) = code_blocks(PAGE, 'json')
    claims = json.loads(token_text)
    caller = Caller(claims, claims['sub'], claims['iss'])
    policy = AccessPolicy(None, lambda: rules)
    assert policy.is_admin(rules, 'tenant-one', caller)
    assert policy.is_admin(rules, 'tenant-two', caller)
    assert authz.any_rule_matches(['tenant_group'], result.admin_rules, claims, 'alice',
                                  'tenant-two')
    # without the affiliate role, tenant-one is out of reach; bob without
    # the group can neither act on nor read tenant-two
    claims['resources_access']['account']['roles'] = ['other_role']
    assert not policy.is_admin(rules, 'tenant-one', caller)
    bob = Caller({**claims, 'sub': 'bob', 'groups': []}, 'carol', claims['iss'])
    assert not policy.may_read(rules, 'tenant-two', bob)
    assert policy.may_read(rules, 'tenant-one', None)
