"""``zuul-admin config-check`` over the real configurations of the corpus
(the corpus tier: ``GATEKEEP_CORPUS=DIR``, see tests/harness/corpus.py),
loaded as tests/unit/test_corpus_configs.py loads them: each repository on
its own, and OpenDev's ``openstack`` tenant from its real main.yaml.

Those configurations use objects that live in repositories the corpus
does not have (base jobs, nodesets, project-templates, pipelines). The
test supplies them as a stub config project, built from config-check's
own "unknown ..." / "not defined" reports, until nothing is missing; then
config-check (which freezes every job graph) must report nothing but
KNOWN below, and exit 0 where none of KNOWN applies. A broken
``.zuul.yaml`` injected into a copy must make it exit 1 naming that file
and line."""

from __future__ import annotations

import io
import re
import shutil

import pytest
import yaml

from tests.harness import corpus
from zuul.cmd.admin import main

pytestmark = pytest.mark.corpus

CORPUS = corpus.path('zuul-configs')

# Deployments whose pipelines use the github driver (issue 19) and the
# gitlab driver (issue 31: opentelekomcloud's).
GITHUB_PIPELINES = ('opentelekomcloud-infra+zuul-project-config', 'vexxhost+ci-config')

REPOS = corpus.cases(
    'repositories (zuul-configs/*)',
    lambda root: sorted(p.name for p in (root / 'zuul-configs').iterdir()))

_MISSING = [
    ('job', re.compile(r'unknown parent (?:job )?"([^"]+)"')),
    ('job', re.compile(r'job "([^"]+)" is not defined')),
    ('nodeset', re.compile(r'unknown nodeset "([^"]+)"')),
    ('project-template', re.compile(r'unknown project-template "([^"]+)"')),
    ('pipeline', re.compile(r'"([\w-]+)" is neither a project attribute nor a pipeline')),
    ('semaphore', re.compile(r'unknown semaphore "([^"]+)"')),
]


# What config-check reports in these real configurations, as the running
# scheduler would: pipelines using drivers this system does not have, and
# a job graph that cannot be frozen (a hard dependency on a job the post
# pipeline lacks).
KNOWN = re.compile(
    r'no connection or driver named "gitea" is available'
    r'|connection "\w+" uses the driver "gitea"'
    r'|job graph cannot be frozen: Job "propose-updates" depends on '
    r'"publish-service-types-authority", which is not part of this project-pipeline'
    # use-nodepool: false, with the label objects in opendev/zuul-providers
    # (not in the corpus).
    r'|is not defined by a label object \(the tenant does not use Nodepool\)')


def _unexpected(out):
    return [e for e in _errors(out) if not KNOWN.search(e)]


def _run(*argv):
    out = io.StringIO()
    rc = main([str(a) for a in argv], out=out)
    return rc, out.getvalue()


def _stub(missing: dict) -> list:
    stanzas = []
    for kind, names in missing.items():
        for name in sorted(names):
            if kind == 'job':
                stanzas.append({'job': {'name': name, 'parent': None} if name == 'base'
                                else {'name': name}})
            elif kind == 'nodeset':
                stanzas.append({'nodeset': {'name': name,
                                            'nodes': [{'name': 'node', 'label': name}]}})
            elif kind == 'pipeline':
                stanzas.append({'pipeline': {'name': name, 'manager': 'independent'}})
            elif kind == 'semaphore':
                stanzas.append({'semaphore': {'name': name, 'max': 1}})
            else:
                stanzas.append({kind: {'name': name}})
    return stanzas


def _check_with_stubs(stub_dir, *argv):
    """config-check with a stub project supplying every object the
    configuration refers to but the corpus does not hold."""
    missing: dict[str, set] = {}
    stub_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(6):
        (stub_dir / 'zuul.yaml').write_text(yaml.safe_dump(_stub(missing)))
        rc, out = _run('config-check', *argv)
        added = False
        for line in out.splitlines():
            for kind, pattern in _MISSING:
                for name in pattern.findall(line):
                    if name not in missing.setdefault(kind, set()):
                        missing[kind].add(name)
                        added = True
        if not added:
            return rc, out
    return rc, out


def _errors(out):
    return [line for line in out.splitlines() if re.match(r'^\S+:\d+: (?!warning:)', line)]


@pytest.mark.parametrize('repo', REPOS)
def test_config_check_of_each_corpus_repository(repo, tmp_path):
    stub = tmp_path / 'stub'
    rc, out = _check_with_stubs(stub, '-c', _zuul_conf(tmp_path), f'stub/external={stub}',
                                f'{repo.replace("+", "/")}={CORPUS / repo}')
    assert _unexpected(out) == []
    errors = len(_errors(out))
    assert rc == (1 if errors else 0)
    assert re.search(rf'^1 tenant\(s\), \d+ project\(s\), \d+ job\(s\) frozen in \d+ '
                     rf'project-pipeline\(s\): {errors} errors, \d+ warnings$', out, re.M), \
        out[-500:]


def test_config_check_of_github_and_gitlab_pipelines_passes(tmp_path):
    """Pipelines triggered by and reporting to GitHub (pull_request
    actions, status and label requirements, status/merge reporters) and
    GitLab (gl_merge_request actions, approved and labels requirements,
    comment/approval/merge reporters) load with no error."""
    for repo in GITHUB_PIPELINES:
        stub = tmp_path / repo / 'stub'
        rc, out = _check_with_stubs(stub, '-c', _zuul_conf(tmp_path),
                                    f'stub/external={stub}', CORPUS / repo)
        assert not [e for e in _errors(out) if 'github' in e.lower() or
                    'gitlab' in e.lower()], out[-2000:]
        assert _unexpected(out) == []
        # vexxhost's pipelines are Gerrit and GitHub only; the other
        # deployment's also name gitea (a driver not built).
        assert rc == (0 if repo == 'vexxhost+ci-config' else 1), out[-2000:]


def _zuul_conf(tmp_path):
    conf = tmp_path / 'zuul.conf'
    conf.write_text('[scheduler]\ntenant_config = /nonexistent/main.yaml\n\n'
                    '[connection gerrit]\ndriver = gerrit\nserver = review.opendev.org\n'
                    'canonical_hostname = opendev.org\nuser = zuul\n\n'
                    '[connection googlesource]\ndriver = gerrit\n'
                    'server = gerrit.googlesource.com\nuser = zuul\n\n'
                    '[connection gerrithub]\ndriver = gerrit\nserver = review.gerrithub.io\n'
                    'user = zuul\n\n'
                    '[connection smtp]\ndriver = smtp\nserver = localhost\n')
    return conf


def _openstack_tenant(tmp_path):
    """main.yaml with the stub project in the openstack tenant, and a
    source root holding the three repositories of it the corpus has."""
    with open(CORPUS / 'openstack+project-config' / 'zuul' / 'main.yaml') as f:
        data = yaml.safe_load(f)
    tenant = next(o['tenant'] for o in data if 'tenant' in o and
                  o['tenant']['name'] == 'openstack')
    tenant['source']['gerrit']['config-projects'].insert(0, 'stub/external')
    # The corpus holds none of the tenant's GitHub projects (and a tenant
    # source naming a connection zuul.conf lacks is an error).
    del tenant['source']['github']
    data = [o for o in data if 'tenant' not in o or o['tenant'] is tenant]
    main_yaml = tmp_path / 'main.yaml'
    main_yaml.write_text(yaml.safe_dump(data))
    src = tmp_path / 'src'
    for project, repo in {'openstack/project-config': 'openstack+project-config',
                          'zuul/zuul-jobs': 'g-chauvel+zuul-jobs',
                          'openstack/openstack-zuul-jobs': 'openstack+openstack-zuul-jobs'
                          }.items():
        (src / project).parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(CORPUS / repo, src / project, symlinks=True,
                        ignore=shutil.ignore_patterns('.git'))
    return main_yaml, src


def test_config_check_of_the_opendev_openstack_tenant(tmp_path):
    main_yaml, src = _openstack_tenant(tmp_path)
    args = ('-c', _zuul_conf(tmp_path), '--tenant-config', main_yaml, '--tenant',
            'openstack', '--src-root', src)
    rc, out = _check_with_stubs(src / 'stub' / 'external', *args)
    assert _unexpected(out) == []
    known = len(_errors(out))
    assert rc == (1 if known else 0)
    summary = out.splitlines()[-1]
    m = re.match(r'1 tenant\(s\), (\d+) project\(s\), (\d+) job\(s\) frozen in (\d+) '
                 rf'project-pipeline\(s\): {known} errors', summary)
    assert m and int(m.group(1)) > 1000 and int(m.group(2)) > 1000, summary

    # A broken .zuul.yaml in a checkout of an untrusted project of the
    # tenant (nova): a dependency cycle only freezing finds, and an unknown
    # attribute.
    broken = src / 'openstack' / 'nova' / '.zuul.yaml'
    broken.parent.mkdir(parents=True)
    broken.write_text(
        '- job:\n'
        '    name: cc-one\n'
        '- job:\n'
        '    name: cc-two\n'
        '- project:\n'
        '    check:\n'
        '      jobs:\n'
        '        - cc-one:\n'
        '            dependencies: [cc-two]\n'
        '        - cc-two:\n'
        '            dependencies: [cc-one]\n'
        '- job:\n'
        '    name: cc-three\n'
        '    tiemout: 10\n')
    rc, out = _run('config-check', *args)
    assert rc == 1
    errors = _unexpected(out)
    assert any(e.startswith(f'{broken}:8: ') and 'project openstack/nova branch master'
               in e and 'Dependency cycle: cc-one -> cc-two -> cc-one' in e
               for e in errors), errors
    assert any(e.startswith(f'{broken}:12: ') and 'tiemout' in e for e in errors), errors
    assert len(errors) == 2, errors
