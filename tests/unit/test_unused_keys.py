"""Keys accepted without effect are never silent: loading them gives a
warning naming the key and the reason (zuul/configloader/unused.py), which
tenant-conf-check prints and the layout carries for config-check."""

from __future__ import annotations

import io
import textwrap

from zuul.configloader.layout import ConfigFile, LayoutLoader
from zuul.configloader.tenant import load_tenant_config, tenant_conf_check
from zuul.driver.registry import default_registry
from zuul.model.tenant import Tenant, TenantProject

CONFIG = TenantProject('gerrit', 'org/config', trusted=True)


def _load(text):
    return LayoutLoader(default_registry(), {'gerrit': 'gerrit'},
                        {'gerrit': 'review.example.org'}).load(
        Tenant(name='t', projects=[CONFIG]),
        [ConfigFile(path='zuul.yaml', text=textwrap.dedent(text), project=CONFIG,
                    branch='master')])


def test_job_and_pipeline_keys_without_effect_warn_with_file_and_line():
    layout = _load("""
        - pipeline:
            name: check
            manager: independent
            message:
              gerrit: {}
        - job:
            name: base
            parent: null
            attempts-limit: 2
        """)
    warnings = {(e.line, e.reason) for e in layout.errors if e.severity == 'warning'}
    assert any('"message"' in reason and line == 2 for line, reason in warnings), warnings
    assert any('"attempts-limit"' in reason and '"attempts"' in reason and line == 7
               for line, reason in warnings), warnings
    assert not [e for e in layout.errors if e.severity == 'error']
    assert 'base' in layout.jobs and 'check' in layout.pipelines


def test_a_configuration_without_them_has_no_such_warning():
    layout = _load("""
        - job:
            name: base
            parent: null
            attempts: 2
        """)
    assert not [e for e in layout.errors if e.severity == 'warning']


MAIN = """
- admin-rule:
    name: admins
    conditions:
      - sub: alice
- tenant:
    name: t1
    admin-rules: [admins]
    source:
      gerrit:
        untrusted-projects:
          - org/app:
              allow-base-jobs: true
"""


def test_tenant_file_keys_without_effect_warn(tmp_path):
    path = tmp_path / 'main.yaml'
    path.write_text(MAIN)
    result = load_tenant_config(str(path), {'gerrit'})
    assert not result.errors
    reasons = [w.reason for w in result.warnings]
    assert any('"allow-base-jobs"' in r for r in reasons)
    # Authorization rules act in zuul-web (tests/unit/test_web_auth*.py).
    assert not any('admin-rule' in r for r in reasons), reasons
    assert result.admin_rules == {'admins': [{'sub': 'alice'}]}
    assert result.tenants['t1'].admin_rules == ['admins']
    conf = tmp_path / 'zuul.conf'
    conf.write_text(f'[scheduler]\ntenant_config = {path}\njobdir = /tmp/x\n\n'
                    '[executor]\ntrusted_ro_paths = /opt\n\n'
                    '[connection gerrit]\ndriver = gerrit\nserver = review.example.org\n')
    out = io.StringIO()
    assert tenant_conf_check(str(conf), out) == 0
    printed = out.getvalue()
    # trusted_ro_paths acts (trusted playbooks run in a sandbox): no warning.
    assert printed.count('warning:') == 2 and 'allow-base-jobs' in printed
    assert '[scheduler] jobdir' in printed and 'trusted_ro_paths' not in printed
