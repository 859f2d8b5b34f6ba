"""Image build and upload records in a real ZooKeeper (seed 002's paths),
their locks and flags, and the launcher's choice of upload."""

from __future__ import annotations

import threading

import pytest

from nodepool.zk import paths
from nodepool.zk.api import NodepoolZooKeeper
from nodepool.zk.images import (
    BUILDING,
    DELETING,
    FAILED,
    READY,
    UPLOADING,
    ImageBuild,
    ImageCache,
    ImageRecordChangedError,
    ImageRecordGoneError,
    ImageUpload,
    parse_build_display_id,
)
from nodepool.zk.records import WireVersionError


@pytest.fixture
def images(zk_chroot):
    return NodepoolZooKeeper(zk_chroot.client()).images


def add_build(images, state=READY, image='ubuntu', builder_id='b1') -> ImageBuild:
    build = ImageBuild(builder='host', builder_id=builder_id, formats=['qcow2'], state=state,
                       state_time=1.0)
    images.store_build(image, build)
    return build


def add_upload(images, build, provider, state=READY, external_id='ext') -> ImageUpload:
    upload = ImageUpload(external_id=external_id, external_name=f'x-{build.id}',
                         format='qcow2', state=state, state_time=2.0)
    images.store_upload(build.image_name, build.id, provider, upload)
    return upload


def test_records_round_trip_and_refuse_newer_schemas():
    build = ImageBuild(builder='h', builder_id='id', filename='/i/x-1', formats=['tar'],
                       state=READY, state_time=5.0, id='0000000001', image_name='x')
    data = build.to_dict()
    assert data == {'builder': 'h', 'builder_id': 'id', 'filename': '/i/x-1',
                    'formats': ['tar'], 'state': READY, 'state_time': 5.0,
                    'schema_version': 1}
    again = ImageBuild.from_dict({**data, 'future_key': 1}, id='0000000001', image_name='x')
    assert again.display_id == 'x-0000000001'
    assert again.to_dict()['future_key'] == 1        # kept for the writer that knows it
    with pytest.raises(WireVersionError):
        ImageUpload.from_dict({'schema_version': 99})
    with pytest.raises(ValueError):
        build.set_state('gone')
    upload = ImageUpload(id='0000000003', image_name='x', build_id='0000000001')
    assert upload.image_id == 'x-0000000001-0000000003'
    assert set(upload.to_dict()) == {'external_id', 'external_name', 'format', 'state',
                                     'state_time', 'schema_version'}
    assert parse_build_display_id('ubuntu-jammy-0000000012') == ('ubuntu-jammy', '0000000012')
    assert parse_build_display_id('ubuntu') is None
    assert parse_build_display_id('-0000000001') is None


def test_builds_and_uploads_live_at_the_seed_paths(images, zk_chroot):
    b1 = add_build(images)
    b2 = add_build(images, BUILDING)
    assert (b1.id, b2.id) == ('0000000000', '0000000001')
    upload = add_upload(images, b1, 'cloud-a')
    client = images.client
    assert client.exists(f'/nodepool/image/ubuntu/builds/{b1.id}') is not None
    assert client.exists(f'/nodepool/image/ubuntu/builds/{b1.id}/provider/cloud-a/images/'
                         f'{upload.id}') is not None
    assert [b.id for b in images.get_builds('ubuntu')] == [b1.id, b2.id]
    assert [b.id for b in images.get_builds('ubuntu', (READY,))] == [b1.id]
    assert images.get_most_recent_build('ubuntu').id == b1.id
    assert images.get_build_provider_names('ubuntu', b1.id) == ['cloud-a']
    fetched = images.get_upload('ubuntu', b1.id, 'cloud-a', upload.id)
    assert (fetched.external_id, fetched.provider_name, fetched.build_id) == \
        ('ext', 'cloud-a', b1.id)
    assert images.get_image_names() == ['ubuntu']

    # Versioned writes and vanished records.
    stale = images.get_build('ubuntu', b2.id)
    b2.set_state(READY)
    images.store_build('ubuntu', b2)
    stale.set_state(FAILED)
    with pytest.raises(ImageRecordChangedError):
        images.store_build('ubuntu', stale, expected_version=stale.stat.version)
    assert images.get_build('ubuntu', b2.id).state == READY

    # A build with uploads is not deleted; without, it goes (locks too).
    assert not images.delete_build('ubuntu', b1.id)
    images.delete_upload(upload)
    lock = images.lock_upload('ubuntu', b1.id, 'cloud-a')
    images.unlock(lock)
    assert images.delete_build('ubuntu', b1.id)
    assert client.exists(paths.build_path('ubuntu', b1.id)) is None
    with pytest.raises(ImageRecordGoneError):
        images.store_build('ubuntu', b1)
    with pytest.raises(ImageRecordGoneError):
        images.store_upload('ubuntu', b1.id, 'cloud-a', ImageUpload())
    # Locking a deleted build's uploads never brings it back.
    assert images.lock_upload('ubuntu', b1.id, 'cloud-a') is None
    assert client.exists(paths.build_path('ubuntu', b1.id)) is None

    images.delete_build('ubuntu', b2.id)
    assert images.remove_image('ubuntu')
    assert images.get_image_names() == []


def test_most_recent_upload_is_the_newest_ready_one(images):
    provider = 'cloud-a'
    assert images.get_most_recent_upload('ubuntu', provider) is None
    b1 = add_build(images)
    add_upload(images, b1, provider, external_id='old-1')
    u12 = add_upload(images, b1, provider, external_id='old-2')
    add_upload(images, b1, provider, state=FAILED, external_id=None)
    add_upload(images, b1, 'cloud-b', external_id='elsewhere')
    assert images.get_most_recent_upload('ubuntu', provider).id == u12.id
    # A newer build still uploading does not hide the older build's upload.
    b2 = add_build(images)
    add_upload(images, b2, provider, state=UPLOADING, external_id=None)
    assert images.get_most_recent_upload('ubuntu', provider).external_id == 'old-2'
    u2 = add_upload(images, b2, provider, external_id='new')
    assert images.get_most_recent_upload('ubuntu', provider).image_id == \
        f'ubuntu-{b2.id}-{u2.id}'
    # Builds being deleted are not launched from.
    b2.set_state(DELETING)
    images.store_build('ubuntu', b2)
    assert images.get_most_recent_upload('ubuntu', provider).external_id == 'old-2'
    assert images.get_most_recent_upload('ubuntu', 'cloud-b').external_id == 'elsewhere'
    assert images.get_most_recent_upload('ubuntu', 'cloud-c') is None


def test_build_lock_is_exclusive_across_clients(zk_chroot):
    a = NodepoolZooKeeper(zk_chroot.client()).images
    b = NodepoolZooKeeper(zk_chroot.client()).images
    assert a.build_lock_holder('ubuntu') is None
    lock = a.lock_build('ubuntu', identifier='builder-a')
    assert lock is not None
    assert b.lock_build('ubuntu', identifier='builder-b') is None
    assert b.build_lock_holder('ubuntu') == 'builder-a'
    got = []
    waiter = threading.Thread(target=lambda: got.append(
        b.lock_build('ubuntu', identifier='builder-b', blocking=True, timeout=30)))
    waiter.start()
    a.unlock(lock)
    waiter.join(30)
    assert got and got[0] is not None
    assert a.build_lock_holder('ubuntu') == 'builder-b'
    b.unlock(got[0])
    # A lock held by a session that ends is released with it.
    lock = a.lock_build('ubuntu', identifier='builder-a')
    assert lock is not None
    zk_chroot.expire_session(a.client)
    assert b.build_lock_holder('ubuntu') is None


def test_request_and_pause_flags(images):
    assert not images.is_build_requested('ubuntu')
    assert images.request_build('ubuntu')
    assert not images.request_build('ubuntu')       # already asked for
    assert images.client.exists('/nodepool/image/ubuntu/request-build') is not None
    images.clear_build_request('ubuntu')
    images.clear_build_request('ubuntu')
    assert not images.is_build_requested('ubuntu')
    images.pause_image('ubuntu')
    images.pause_image('ubuntu')
    assert images.is_image_paused('ubuntu')
    images.unpause_image('ubuntu')
    assert not images.is_image_paused('ubuntu')


def test_image_cache_follows_changes(images, zk_chroot):
    changed = threading.Condition()
    count = [0]

    def bump():
        with changed:
            count[0] += 1
            changed.notify_all()

    cache = ImageCache(zk_chroot.client(), on_change=bump)
    cache.start()
    try:
        def wait(predicate):
            with changed:
                assert changed.wait_for(predicate, 30)

        build = add_build(images)
        upload = add_upload(images, build, 'cloud-a', external_id='img-1')
        wait(lambda: cache.get_most_recent_upload('ubuntu', 'cloud-a') is not None)
        cached = cache.get_most_recent_upload('ubuntu', 'cloud-a')
        assert (cached.id, cached.build_id, cached.external_id) == \
            (upload.id, build.id, 'img-1')
        assert [b.id for b in cache.get_builds('ubuntu')] == [build.id]
        upload.set_state(DELETING)
        images.store_upload('ubuntu', build.id, 'cloud-a', upload)
        wait(lambda: cache.get_most_recent_upload('ubuntu', 'cloud-a') is None)
        assert count[0] > 0
    finally:
        cache.stop()
