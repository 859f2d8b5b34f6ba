"""The ``nodepool`` image commands and the ``nodepool-builder`` daemon as a
real process (pid file, SIGTERM, and a SIGKILL in the middle of a build
that its restart cleans up)."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from nodepool.cmd import client
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.images import BUILDING, DELETING, READY, ImageCache
from tests.functional import test_builder_support as support
from tests.functional.test_builder_support import (
    build_states,
    builder_config,
    needs_netns,
    upload_states,
)

builders = support.builders
upload_provider = support.upload_provider
gate = support.gate


def zk_section(zk_chroot, timeout: int = 10) -> str:
    host, _, rest = zk_chroot.hosts.partition(':')
    port, _, chroot = rest.partition('/')
    return (f'zookeeper-servers:\n  - host: {host}\n    port: {port}\n'
            f'    chroot: /{chroot}\nzookeeper-timeout: {timeout}\n')


def run_cli(config_file, *args, capsys):
    rc = client.main(['-c', str(config_file), *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def row_of(table: str, text: str) -> list[str]:
    line = next(line for line in table.splitlines() if text in line)
    return [cell.strip() for cell in line.strip('|').split('|')]


class ImageWatcher:
    """Waits on ZooKeeper changes under /nodepool/image (made by another
    process), re-checking a condition whenever one arrives."""

    def __init__(self, zk_client):
        self.zk = NodepoolZooKeeper(zk_client)
        self.changed = threading.Condition()
        self.cache = ImageCache(zk_client, on_change=self._notify)
        self.cache.start()

    def _notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def wait(self, predicate, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f'timed out waiting for {what}')
                self.changed.wait(min(left, 1.0))

    def builds(self) -> list[tuple[str, str]]:
        return [(b.id, b.state) for b in self.zk.images.get_builds('tiny')]


@needs_netns
def test_image_commands(builders, upload_provider, gate, zk_chroot, tmp_path, capsys):
    text = builder_config(upload_provider, tmp_path, env={'BUILD_GATE': gate.path})
    config_file = tmp_path / 'nodepool.yaml'
    config_file.write_text(zk_section(zk_chroot) + text)
    builder = builders.make(text)
    provider = upload_provider['name']

    builder.wait_for(lambda: build_states(builder) == [('0000000001', BUILDING)],
                     what='a build running')
    rc, out, _ = run_cli(config_file, 'dib-image-list', capsys=capsys)
    assert rc == 0
    assert [h.strip() for h in out.splitlines()[1].strip('|').split('|')] == [
        'ID', 'Image', 'Builder', 'Formats', 'State', 'Age']
    assert row_of(out, 'tiny-0000000001')[:5] == [
        'tiny-0000000001', 'tiny', socket.gethostname(), 'tar', 'building']
    rc, _, err = run_cli(config_file, 'dib-image-delete', 'tiny-0000000001', capsys=capsys)
    assert rc == 1 and 'still building' in err
    gate.open()
    builder.wait_for(lambda: upload_states(builder) == [('0000000001', '0000000001', READY)],
                     what='the upload')

    row = _check_lists(config_file, builder, provider, upload_provider, capsys)

    # image-build: a request the builder serves.
    rc, out, _ = run_cli(config_file, 'image-build', 'tiny', capsys=capsys)
    assert rc == 0 and 'requested' in out
    rc, _, err = run_cli(config_file, 'image-build', 'nope', capsys=capsys)
    assert rc == 1 and "no diskimage 'nope'" in err
    builder.wait_for(lambda: len(build_states(builder)) == 2, what='the requested build')
    gate.open()
    builder.wait_for(lambda: ('0000000002', '0000000001', READY) in upload_states(builder),
                     what='its upload')

    _check_deletes(config_file, builder, provider, row, capsys)
    _check_pause(config_file, builder, gate, capsys)


def _check_lists(config_file, builder, provider, upload_provider, capsys):
    """image-list and dib-image-list, table and JSON; the upload's row."""
    rc, out, _ = run_cli(config_file, 'image-list', capsys=capsys)
    assert rc == 0
    assert [h.strip() for h in out.splitlines()[1].strip('|').split('|')] == [
        'Build ID', 'Upload ID', 'Provider', 'Image', 'Provider Image Name',
        'Provider Image ID', 'State', 'Age']
    row = row_of(out, provider)
    assert row[:6] == ['0000000001', '0000000001', provider, 'tiny', 'tiny-0000000001',
                       os.path.join(upload_provider['state-dir'], 'images',
                                    'tiny-0000000001-0000000001')]
    assert row[6] == READY
    rc, out, _ = run_cli(config_file, 'image-list', '--json', capsys=capsys)
    (upload,) = json.loads(out)
    assert (upload['image'], upload['build_id'], upload['upload_id'], upload['provider'],
            upload['state'], upload['format']) == \
        ('tiny', '0000000001', '0000000001', provider, READY, 'tar')
    rc, out, _ = run_cli(config_file, 'dib-image-list', '--json', capsys=capsys)
    (build,) = json.loads(out)
    assert (build['id'], build['formats'], build['state'], build['builder_id']) == \
        ('tiny-0000000001', ['tar'], READY, builder.builder_id)
    return row


def _check_deletes(config_file, builder, provider, row, capsys):
    # image-delete: the builder removes the upload from the provider.
    rc, _, err = run_cli(config_file, 'image-delete', '--provider', provider, '--image',
                         'tiny', '--build-id', '0000000001', '--upload-id', '0000000009',
                         capsys=capsys)
    assert rc == 1 and 'no upload' in err
    rc, out, _ = run_cli(config_file, 'image-delete', '--provider', provider, '--image',
                         'tiny', '--build-id', '0000000001', '--upload-id', '0000000001',
                         capsys=capsys)
    assert rc == 0 and 'marked for deletion' in out
    builder.wait_for(lambda: ('0000000001', '0000000001', READY) not in upload_states(builder)
                     and not any(s == DELETING for *_, s in upload_states(builder)),
                     what='the upload deleted')
    assert not os.path.exists(row[5])

    # dib-image-delete: the build, its uploads, files and record go.
    for bad, message in (('tiny', 'is not a build id'), ('tiny-0000000042', 'no build')):
        rc, _, err = run_cli(config_file, 'dib-image-delete', bad, capsys=capsys)
        assert rc == 1 and message in err
    rc, out, _ = run_cli(config_file, 'dib-image-delete', 'tiny-0000000001', capsys=capsys)
    assert rc == 0
    builder.wait_for(lambda: [b for b, _ in build_states(builder)] == ['0000000002'],
                     what='the build deleted')
    assert not os.path.exists(builder.output_path('tiny', '0000000001') + '.tar')


def _check_pause(config_file, builder, gate, capsys):
    # image-pause / image-unpause.
    rc, out, _ = run_cli(config_file, 'image-pause', 'tiny', capsys=capsys)
    assert rc == 0 and builder.images.is_image_paused('tiny')
    rc, out, err = run_cli(config_file, 'image-build', 'tiny', capsys=capsys)
    assert rc == 0 and 'paused' in err
    builder.run_build_pass()
    assert len(build_states(builder)) == 1
    rc, out, _ = run_cli(config_file, 'image-unpause', 'tiny', capsys=capsys)
    assert rc == 0 and not builder.images.is_image_paused('tiny')
    builder.wait_for(lambda: len(build_states(builder)) == 2, what='built once unpaused')
    gate.open()


def start_daemon(config_file, tmp_path, name: str) -> subprocess.Popen:
    log = open(tmp_path / f'{name}.log', 'w')
    return subprocess.Popen([sys.executable, '-m', 'nodepool.cmd.builder', '-c',
                             str(config_file), '-d', '-p', str(tmp_path / 'builder.pid'),
                             '--upload-workers', '2'],
                            stdout=log, stderr=subprocess.STDOUT)


@needs_netns
def test_builder_killed_mid_build_is_cleaned_by_its_restart(upload_provider, gate, zk_chroot,
                                                            tmp_path):
    images_dir = tmp_path / 'images-a'
    config_file = tmp_path / 'nodepool.yaml'
    gated = builder_config(upload_provider, tmp_path, env={'BUILD_GATE': gate.path})
    config_file.write_text(zk_section(zk_chroot, timeout=3) + gated)
    watcher = ImageWatcher(zk_chroot.client())
    daemon = start_daemon(config_file, tmp_path, 'first')
    try:
        watcher.wait(lambda: watcher.builds() == [('0000000001', BUILDING)], 'a build')
        partial = images_dir / 'tiny-0000000001.partial'
        watcher.wait(partial.exists, 'the build under way')
        assert (tmp_path / 'builder.pid').read_text().strip() == str(daemon.pid)
        daemon.send_signal(signal.SIGKILL)
        assert daemon.wait(30) == -signal.SIGKILL
    finally:
        if daemon.poll() is None:
            daemon.kill()
    assert watcher.builds() == [('0000000001', BUILDING)]     # left behind
    assert partial.exists()

    # The restart (same images-dir, so the same builder id) finds its
    # own incomplete build, removes it, and builds again once the dead
    # session's build lock has expired.
    config_file.write_text(zk_section(zk_chroot, timeout=3) +
                           builder_config(upload_provider, tmp_path))
    daemon = start_daemon(config_file, tmp_path, 'second')
    try:
        watcher.wait(lambda: all(b != '0000000001' for b, _ in watcher.builds()),
                     'the incomplete build removed')
        assert sorted(p.name for p in images_dir.iterdir()
                      if p.name.startswith('tiny-0000000001')) == []
        watcher.wait(lambda: ('0000000002', READY) in watcher.builds(), 'a new build',
                     timeout=60)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
        watcher.cache.stop()
    assert not (tmp_path / 'builder.pid').exists()
    log = (tmp_path / 'second.log').read_text()
    assert 'left incomplete by an earlier run of this builder' in log
    # The first run's build command died with it: nothing waits at the gate.
    with pytest.raises(OSError) as failure:
        os.open(gate.path, os.O_WRONLY | os.O_NONBLOCK)
    assert failure.value.errno == errno.ENXIO


def test_builder_refuses_a_config_without_images_dir(zk_chroot, tmp_path):
    config_file = tmp_path / 'nodepool.yaml'
    config_file.write_text(zk_section(zk_chroot) + 'diskimages:\n  - name: x\n'
                           '    elements: [vm]\n')
    proc = subprocess.run([sys.executable, '-m', 'nodepool.cmd.builder', '-c',
                           str(config_file), '-d'], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert 'has no images-dir' in proc.stderr
    config_file.write_text(zk_section(zk_chroot) + 'diskimages:\n  - name: x\n'
                           '    parent: y\n')
    proc = subprocess.run([sys.executable, '-m', 'nodepool.cmd.builder', '-c',
                           str(config_file), '-d'], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "diskimages[0].parent: diskimage 'x': parent 'y' is not a diskimage" in proc.stderr
