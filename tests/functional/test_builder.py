"""nodepool-builder on a real ZooKeeper: builds with a real build command,
uploads to a real netns provider (rootfs tarballs unpacked on disk), and
retirement of old builds."""

from __future__ import annotations

import glob
import os

import pytest

from nodepool.builder.builder import BuilderError
from nodepool.zk.images import (
    BUILDING,
    DELETING,
    FAILED,
    READY,
    UPLOADING,
    ImageBuild,
    ImageUpload,
)
from tests.functional import test_builder_support as support
from tests.functional.test_builder_support import (
    FakeClock,
    build_states,
    builder_config,
    fast_builder_settings,
    needs_netns,
    upload_states,
)

builders = support.builders
upload_provider = support.upload_provider
gate = support.gate


def provider_images(provider) -> list[str]:
    """The uploads the netns provider holds (unpacked directories)."""
    d = os.path.join(provider['state-dir'], 'images')
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def image_files(builder, build_id: str) -> list[str]:
    return sorted(os.path.basename(p) for p in
                  glob.glob(os.path.join(builder.images_dir, f'tiny-{build_id}.*')))


@needs_netns
def test_requested_build_happens_once_with_two_builders(builders, upload_provider, gate,
                                                        tmp_path):
    env = {'BUILD_GATE': gate.path}
    a = builders.make(builder_config(upload_provider, tmp_path, 'a', env=env))
    b = builders.make(builder_config(upload_provider, tmp_path, 'b', env=env))
    assert a.builder_id != b.builder_id

    # No ready build: both want one; one gets the lock and builds it.
    a.wait_for(lambda: build_states(a) == [('0000000001', BUILDING)], what='first build')
    first = a.images.get_build('tiny', '0000000001')
    holder, other = (a, b) if first.builder_id == a.builder_id else (b, a)
    other.run_build_pass()
    assert other.counters['builds_started'] == 0       # it sees the build under way
    gate.open()
    a.wait_for(lambda: build_states(a) == [('0000000001', READY)], what='first build ready')
    for builder in (a, b):
        builder.run_build_pass()
    assert build_states(a) == [('0000000001', READY)]

    # A request: served once, by whichever builder gets the lock.
    assert a.images.request_build('tiny')
    # The flag is cleared once the build is under way.
    a.wait_for(lambda: len(build_states(a)) == 2 and not a.images.is_build_requested('tiny'),
               what='the requested build')
    second = a.images.get_build('tiny', '0000000002')
    other = b if second.builder_id == a.builder_id else a
    busy = other.counters['build_lock_busy']
    other.images.request_build('tiny')                  # asked again meanwhile
    other.run_build_pass()
    assert other.counters['build_lock_busy'] > busy
    gate.open()
    a.wait_for(lambda: build_states(a)[-1] == ('0000000002', READY), what='requested build')
    # The request made during the build is served by one more build.
    a.wait_for(lambda: len(build_states(a)) == 3, what='the second request')
    gate.open()
    a.wait_for(lambda: build_states(a)[-1] == ('0000000003', READY), what='third build')
    for builder in (a, b):
        builder.run_build_pass()
    # Three builds in all (the first is being retired: two newer are ready).
    assert build_states(a)[-2:] == [('0000000002', READY), ('0000000003', READY)]
    assert a.counters['builds_started'] + b.counters['builds_started'] == 3
    assert not a.images.is_build_requested('tiny')

    # Each build is uploaded by the builder that has its files.
    a.wait_for(lambda: ('0000000003', '0000000001', READY) in upload_states(a),
               what='upload of the newest build')
    build = a.images.get_build('tiny', '0000000003')
    owner = a if build.builder_id == a.builder_id else b
    assert image_files(owner, '0000000003') == ['tiny-0000000003.tar']
    assert image_files(a if owner is b else b, '0000000003') == []
    upload = a.images.get_most_recent_upload('tiny', upload_provider['name'])
    assert (upload.build_id, upload.format, upload.external_name) == \
        ('0000000003', 'tar', 'tiny-0000000003')
    with open(os.path.join(upload.external_id, 'etc', 'nodepool-image')) as f:
        assert f.read().splitlines() == ['image=tiny-0000000003', 'marker=built-for-tests']


@needs_netns
def test_failed_build_is_recorded_and_retried(builders, upload_provider, tmp_path):
    flag = tmp_path / 'fail-once'
    flag.write_text('')
    clock = FakeClock()
    builder = builders.make(builder_config(upload_provider, tmp_path,
                                           env={'FAIL_ONCE': flag}), clock=clock)
    builder.wait_for(lambda: build_states(builder) == [('0000000001', FAILED)],
                     what='a failed build')
    assert image_files(builder, '0000000001') == []      # nothing half-built is kept
    with open(builder.log_path('tiny', '0000000001')) as f:
        text = f.read()
    assert 'failing as asked' in text and 'failed: tiny-image.sh exited with 3' in text
    assert ' -t tar --checksum --no-tmpfs -o ' in text and 'DIB_RELEASE=bookworm' in text

    builder.run_build_pass()                             # within the retry delay: waits
    builder.run_cleanup()                                # the newest failure paces retries
    assert build_states(builder) == [('0000000001', FAILED)]
    clock.advance(61)
    builder.run_build_pass()
    builder.wait_for(lambda: build_states(builder)[-1] == ('0000000002', READY),
                     what='the retry')
    builder.run_cleanup()
    assert build_states(builder) == [('0000000002', READY)]   # the failure is cleared
    assert builder.counters['builds_failed'] == 1


@needs_netns
def test_rebuild_age_and_retiring_the_oldest_build(builders, upload_provider, tmp_path):
    clock = FakeClock()
    builder = builders.make(builder_config(upload_provider, tmp_path, log_retention=2),
                            clock=clock)
    provider = upload_provider['name']
    for n in (1, 2, 3):
        build_id = f'{n:010d}'
        builder.wait_for(lambda: (build_id, '0000000001', READY) in upload_states(builder),
                         what=f'build {n} uploaded')
        assert f'tiny-{build_id}-0000000001' in provider_images(upload_provider)
        builder.run_build_pass()
        assert builder.counters['builds_started'] == n       # young enough: no rebuild
        if n < 3:
            clock.advance(3601)                              # older than rebuild-age
            builder.wake_all()
    # The third build retires the first (cleanup runs on every change).
    builder.run_cleanup()
    builder.wait_for(lambda: [b for b, _ in build_states(builder)] ==
                     ['0000000002', '0000000003'], what='the oldest build retired')
    assert provider_images(upload_provider) == ['tiny-0000000002-0000000001',
                                                'tiny-0000000003-0000000001']
    assert image_files(builder, '0000000001') == []
    assert image_files(builder, '0000000003') == ['tiny-0000000003.tar']
    assert sorted(os.listdir(builder.log_dir)) == ['tiny-0000000002.log',
                                                   'tiny-0000000003.log']
    assert builder.counters['uploads_deleted'] == 1
    newest = builder.images.get_most_recent_upload('tiny', provider)
    assert (newest.build_id, newest.id) == ('0000000003', '0000000001')


@needs_netns
def test_deleted_upload_is_removed_and_uploaded_again(builders, upload_provider, tmp_path):
    builder = builders.make(builder_config(upload_provider, tmp_path))
    builder.wait_for(lambda: upload_states(builder) == [('0000000001', '0000000001', READY)],
                     what='first upload')
    upload = builder.images.get_upload('tiny', '0000000001', upload_provider['name'],
                                       '0000000001')
    upload.set_state(DELETING)                          # what `nodepool image-delete` does
    builder.images.store_upload('tiny', '0000000001', upload_provider['name'], upload)
    builder.wait_for(lambda: upload_states(builder) == [('0000000001', '0000000002', READY)],
                     what='deleted and uploaded again')
    assert provider_images(upload_provider) == ['tiny-0000000001-0000000002']


@needs_netns
def test_failed_upload_is_retried(builders, upload_provider, tmp_path):
    clock = FakeClock()
    # The provider cannot unpack uploads while its images dir is a file.
    os.makedirs(upload_provider['state-dir'])
    blocker = os.path.join(upload_provider['state-dir'], 'images')
    with open(blocker, 'w'):
        pass
    builder = builders.make(builder_config(upload_provider, tmp_path), clock=clock)
    builder.wait_for(lambda: upload_states(builder) == [('0000000001', '0000000001', FAILED)],
                     what='a failed upload')
    builder.run_upload_pass()                            # within the retry delay: waits
    assert len(upload_states(builder)) == 1
    os.unlink(blocker)
    clock.advance(61)
    builder.run_upload_pass()
    builder.wait_for(lambda: upload_states(builder)[-1] == ('0000000001', '0000000002', READY),
                     what='the retried upload')
    builder.run_cleanup()                                # the failed attempt is forgotten
    assert upload_states(builder) == [('0000000001', '0000000002', READY)]
    assert provider_images(upload_provider) == ['tiny-0000000001-0000000002']


@needs_netns
def test_formats_follow_the_providers(builders, upload_provider, tmp_path):
    text = builder_config(upload_provider, tmp_path).replace(
        '    release: bookworm\n', '    release: bookworm\n    formats: [qcow2]\n')
    builder = builders.make(text, start=False)
    image = builder.config.diskimages['tiny']
    assert builder.formats_for(image) == ['qcow2']       # no provider adapter yet
    builder._start_adapters()
    # The netns provider takes tar (or tgz): one of them is added.
    assert builder.formats_for(image) == ['qcow2', 'tar']
    bare = builder_config(upload_provider, tmp_path).replace(
        '    diskimages:\n      - name: tiny\n        pause: false\n', '').replace(
        '            diskimage: tiny\n', '')
    builder = builders.make(bare, start=False)
    builder._start_adapters()
    assert builder.formats_for(builder.config.diskimages['tiny']) == []   # never built


@needs_netns
def test_paused_image_is_not_built(builders, upload_provider, tmp_path):
    builder = builders.make(builder_config(upload_provider, tmp_path), start=False)
    builder.images.pause_image('tiny')
    builder.start()
    builder.run_build_pass()
    assert build_states(builder) == []
    builder.images.unpause_image('tiny')
    builder.wait_for(lambda: build_states(builder) == [('0000000001', READY)],
                     what='built once unpaused')


@needs_netns
def test_upload_pause_in_provider_skips_uploads(builders, upload_provider, tmp_path):
    builder = builders.make(builder_config(upload_provider, tmp_path, upload_pause=True))
    builder.wait_for(lambda: build_states(builder) == [('0000000001', READY)], what='a build')
    builder.run_upload_pass()
    assert upload_states(builder) == []


@needs_netns
def test_stale_records_of_other_builders(builders, upload_provider, tmp_path):
    builder = builders.make(builder_config(upload_provider, tmp_path))
    builder.wait_for(lambda: build_states(builder) == [('0000000001', READY)], what='a build')
    # A build and an upload whose builder died: no lock is held for them.
    ghost = ImageBuild(builder='gone', builder_id='ghost-id', formats=['tar'])
    builder.images.store_build('tiny', ghost)
    stuck = ImageUpload(external_name='tiny-0000000001', format='tar', state=UPLOADING)
    builder.images.store_upload('tiny', '0000000001', 'elsewhere', stuck)
    builder.run_cleanup()
    builder.run_cleanup()
    # The ghost's build is failed (its files are on the ghost's disk: it
    # removes them when it returns); the stuck upload to a provider no
    # longer configured was failed, then forgotten.
    assert builder.images.get_build('tiny', ghost.id).state == FAILED
    assert builder.images.get_uploads('tiny', provider='elsewhere') == []
    assert builder.images.get_uploads('tiny', provider=upload_provider['name'])[0].state == \
        READY


@needs_netns
def test_builder_stop_kills_a_running_build(builders, upload_provider, gate, tmp_path):
    builder = builders.make(builder_config(upload_provider, tmp_path,
                                           env={'BUILD_GATE': gate.path}),
                            settings=fast_builder_settings(kill_grace=5))
    builder.wait_for(lambda: build_states(builder) == [('0000000001', BUILDING)],
                     what='a build running')
    builder.wait_for(lambda: os.path.exists(builder.output_path('tiny', '0000000001') +
                                            '.partial'), what='the build under way')
    builder.stop()
    assert build_states(builder) == [('0000000001', FAILED)]
    assert image_files(builder, '0000000001') == []
    with open(builder.log_path('tiny', '0000000001')) as f:
        assert 'failed: the builder is stopping' in f.read()


def test_builder_needs_images_dir(builders, upload_provider, tmp_path):
    text = builder_config(upload_provider, tmp_path).replace('images-dir:', '# images-dir:')
    with pytest.raises(BuilderError, match='images-dir'):
        builders.make(text)
