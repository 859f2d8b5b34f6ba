"""The builder's configuration (top-level diskimages, inheritance, the
provider and label cross-checks) and its build command."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from nodepool.builder import dib
from nodepool.config import ConfigError, load_config_text, validate_config
from nodepool.config_diskimages import DiskImage

BASE = """
images-dir: /var/lib/nodepool/dib
build-log-dir: /var/log/nodepool/builds
build-log-retention: 3
elements-dir: /etc/nodepool/elements
diskimages:
  - name: base
    abstract: true
    elements: [vm, simple-init]
    env-vars:
      TMPDIR: /opt/dib_tmp
      DIB_CHECKSUM: 1
    rebuild-age: 3600
  - name: debuntu
    abstract: true
    parent: base
    env-vars:
      DIB_APT_LOCAL_CACHE: '0'
      TMPDIR: /opt/other
  - name: jammy
    parent: debuntu
    elements: [ubuntu-minimal]
    release: jammy
    formats: [qcow2, raw]
    python-path: /usr/bin/python3
  - name: custom
    dib-cmd: /usr/local/bin/my-builder --fast
    build-timeout: 600
    pause: true
    username: ci
"""


def issues_of(text: str, tmp_path) -> list[str]:
    path = tmp_path / 'nodepool.yaml'
    path.write_text(text)
    return [str(i) for i in validate_config(str(path))]


def test_diskimages_with_inheritance():
    config = load_config_text(BASE)
    assert (config.images_dir, config.build_log_dir, config.build_log_retention,
            config.elements_dir) == ('/var/lib/nodepool/dib', '/var/log/nodepool/builds', 3,
                                     '/etc/nodepool/elements')
    jammy = config.diskimages['jammy']
    assert jammy.elements == ['vm', 'simple-init', 'ubuntu-minimal']     # appended
    assert jammy.env_vars == {'TMPDIR': '/opt/other', 'DIB_CHECKSUM': '1',
                              'DIB_APT_LOCAL_CACHE': '0'}                # merged
    assert (jammy.rebuild_age, jammy.release, jammy.formats, jammy.python_path,
            jammy.parent, jammy.abstract) == \
        (3600, 'jammy', ['qcow2', 'raw'], '/usr/bin/python3', 'debuntu', False)
    assert config.diskimages['base'].abstract
    custom = config.diskimages['custom']
    assert custom == DiskImage(name='custom', dib_cmd='/usr/local/bin/my-builder --fast',
                               build_timeout=600, pause=True, username='ci',
                               line=custom.line)
    assert (DiskImage('x').rebuild_age, DiskImage('x').build_timeout, DiskImage('x').dib_cmd,
            DiskImage('x').username) == (86400, 28800, 'disk-image-create', 'zuul')


@pytest.mark.parametrize('extra, message', [
    ('  - name: jammy\n    elements: [a]\n',
     "diskimages[4].name: diskimage 'jammy' is defined twice"),
    ('  - name: orphan\n    parent: nowhere\n    elements: [a]\n',
     "diskimages[4].parent: diskimage 'orphan': parent 'nowhere' is not a diskimage"),
    ('  - name: loop1\n    parent: loop2\n  - name: loop2\n    parent: loop1\n',
     "diskimage 'loop1': parent chain loops (loop1 -> loop2 -> loop1)"),
    ('  - name: bad\n    rebuild-age: soon\n', 'expected int'),
])
def test_diskimage_errors_name_the_place(extra, message, tmp_path):
    issues = issues_of(BASE + extra, tmp_path)
    assert any(message in i for i in issues), issues


def test_diskimage_warnings(tmp_path):
    issues = issues_of(BASE + '  - name: bare\n    typo-key: 1\n'
                              '  - name: old\n    elements: [a]\n    build-checksum: true\n'
                              '  - name: kept\n    elements: [a]\n    keep-formats: [raw]\n',
                       tmp_path)
    assert any(":32: warning: diskimages[4].typo-key: diskimage 'bare': unknown key "
               "'typo-key' is ignored" in i for i in issues), issues
    assert any("diskimage 'bare' has no elements" in i for i in issues)
    assert any("'build-checksum' is not supported by this builder" in i for i in issues)
    assert any("diskimage 'kept': keep-formats has no effect without delete-after-upload"
               in i for i in issues), issues
    load_config_text(BASE + '  - name: bare\n    typo-key: 1\n')     # warnings only


NETNS = """
providers:
  - name: local
    driver: netns
    diskimages:
{images}
    pools:
      - name: main
        labels:
{labels}
"""


def netns(images='      - name: jammy', labels='          - name: node\n'
          '            diskimage: jammy') -> str:
    return BASE + NETNS.format(images=images, labels=labels)


def test_provider_diskimages_and_labels():
    config = load_config_text(netns(images='      - name: jammy\n        pause: true\n'
                                           '        meta: {a: b}'))
    provider = config.providers['local']
    assert provider.diskimages['jammy'].pause
    assert provider.diskimages['jammy'].meta == {'a': 'b'}
    label = provider.pools['main'].labels['node']
    assert label.diskimage == 'jammy' and 'diskimage' not in label.settings


@pytest.mark.parametrize('images, labels, message', [
    ('      - name: nope', '          - name: node',
     ":36: providers[0].diskimages[0]: provider 'local' uses diskimage 'nope', which is "
     "not in the top-level diskimages"),
    ('      - name: base', '          - name: node',
     "provider 'local' uses diskimage 'base', which is abstract"),
    ('      - name: jammy', '          - name: node\n            diskimage: custom',
     ":41: providers[0].pools[0].labels[0].diskimage: pool local/main: label 'node' boots "
     "diskimage 'custom', which provider 'local' does not list in its diskimages"),
    ('      - name: jammy', '          - name: node\n            diskimage: jammy\n'
                            '            rootfs: /srv/root',
     "rootfs and diskimage are alternatives"),
    ('      - name: jammy\n      - name: jammy', '          - name: node',
     "diskimage 'jammy' is listed twice"),
])
def test_provider_diskimage_errors(images, labels, message, tmp_path):
    issues = issues_of(netns(images, labels), tmp_path)
    assert any(message in i for i in issues), issues
    with pytest.raises(ConfigError):
        load_config_text(netns(images, labels))


def test_build_command_and_environment():
    image = load_config_text(BASE).diskimages['jammy']
    assert dib.build_command(image, ['qcow2', 'raw'], '/img/jammy-0000000001') == [
        'disk-image-create', '-x', '-t', 'qcow2,raw', '--checksum', '--no-tmpfs', '-o',
        '/img/jammy-0000000001', 'vm', 'simple-init', 'ubuntu-minimal']
    env = dib.build_environment(image, '/etc/nodepool/elements', base={'PATH': '/bin'})
    assert env == {'PATH': '/bin', 'ELEMENTS_PATH': '/etc/nodepool/elements',
                   'DIB_RELEASE': 'jammy', 'TMPDIR': '/opt/other', 'DIB_CHECKSUM': '1',
                   'DIB_APT_LOCAL_CACHE': '0'}
    custom = load_config_text(BASE).diskimages['custom']
    assert dib.build_command(custom, ['tar'], '/o')[:3] == [
        '/usr/local/bin/my-builder', '--fast', '-x']


def script(tmp_path, body: str) -> str:
    path = tmp_path / 'cmd.sh'
    path.write_text('#!/bin/sh\n' + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.parametrize('body, timeout, reason', [
    ('exit 4\n', 30, 'cmd.sh exited with 4'),
    ('echo only-qcow2\n', 30, 'cmd.sh left no out.tar'),
    ('exec sleep 60\n', 1, 'timed out after 1s (build-timeout)'),
])
def test_build_failures(body, timeout, reason, tmp_path):
    image = DiskImage(name='x', dib_cmd=script(tmp_path, body), build_timeout=timeout)
    output = str(tmp_path / 'out')
    result = dib.run_build(image, ['tar'], output, str(tmp_path / 'log'), None,
                           threading.Event(), kill_grace=1)
    assert (result.ok, result.reason) == (False, reason)
    log = (tmp_path / 'log').read_text()
    assert f'failed: {reason}' in log


def test_build_success_and_missing_command(tmp_path):
    body = 'while [ $# -gt 2 ]; do shift; done; echo "$TAG" > "$2.tar"; echo built\n'
    image = DiskImage(name='x', dib_cmd=script(tmp_path, body), env_vars={'TAG': 'v1'})
    output = str(tmp_path / 'out')
    result = dib.run_build(image, ['tar'], output, str(tmp_path / 'log'), None,
                           threading.Event())
    assert (result.ok, result.formats) == (True, ['tar'])
    assert open(output + '.tar').read() == 'v1\n'
    assert 'built' in (tmp_path / 'log').read_text()
    assert dib.remove_outputs(output) == [output + '.tar']
    assert not os.path.exists(output + '.tar')
    missing = DiskImage(name='x', dib_cmd=str(tmp_path / 'no-such-command'))
    result = dib.run_build(missing, ['tar'], output, str(tmp_path / 'log2'), None,
                           threading.Event())
    assert not result.ok
