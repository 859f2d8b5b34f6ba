"""The live console stream: zuul-web relays the executor's growing log."""

import json
import urllib.error
import urllib.request

import pytest

from nodepool.zk.localserver import free_port
from tests.fakes.scheduler_rpc import FINISHED_UUID, RUNNING_UUID
from zuul.executor.logstream import LogStreamServer


@pytest.fixture
def log_stream():
    server = LogStreamServer('127.0.0.1', 0)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _stream_url(web, tenant, uuid):
    return f'{web.base}/api/tenant/{tenant}/console-stream?uuid={uuid}'


def test_console_stream_follows_the_running_build(zuul_web, fake_scheduler, log_stream,
                                                  tmp_path):
    log = tmp_path / 'job-output.txt'
    log.write_text('first line\n')
    log_stream.register(RUNNING_UUID, str(log))
    fake_scheduler.set_stream_url(log_stream.url(RUNNING_UUID))
    response = urllib.request.urlopen(_stream_url(zuul_web, 'tenant-one', RUNNING_UUID))
    assert response.headers['Transfer-Encoding'] == 'chunked'
    assert response.headers['Content-Type'].startswith('text/plain')
    received = b''
    while b'first line\n' not in received:  # arrives before the build ends
        received += response.read1(65536)
    with log.open('a') as f:
        f.write('second line\n')
    log_stream.finish(RUNNING_UUID)
    received += response.read()  # ends when the executor ends the stream
    assert received.decode() == 'first line\nsecond line\n'


def _error(url):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url)
    return e.value.code, json.loads(e.value.read())['error']


def test_console_stream_errors(zuul_web, fake_scheduler):
    base = f'{zuul_web.base}/api/tenant'
    assert _error(f'{base}/tenant-one/console-stream?uuid=not%20a%20uuid') == (
        400, 'uuid must be a build uuid, not "not a uuid"')
    assert _error(f'{base}/tenant-one/console-stream')[0] == 400
    code, message = _error(_stream_url(zuul_web, 'tenant-one', 'f' * 32))
    assert code == 404 and 'no running build' in message
    # another tenant's build is not reachable through this tenant
    code, message = _error(_stream_url(zuul_web, 'tenant-two', RUNNING_UUID))
    assert code == 404 and 'no running build' in message
    assert _error(_stream_url(zuul_web, 'nope', RUNNING_UUID)) == (404, 'Unknown tenant nope')
    # a build without a live log yet, and an executor that went away
    code, message = _error(_stream_url(zuul_web, 'tenant-one', FINISHED_UUID))
    assert code == 404 and 'no live log yet' in message
    fake_scheduler.set_stream_url(f'http://127.0.0.1:{free_port()}/{RUNNING_UUID}')
    code, message = _error(_stream_url(zuul_web, 'tenant-one', RUNNING_UUID))
    assert code == 404 and 'cannot reach the executor' in message


def test_console_stream_of_a_build_the_executor_forgot(zuul_web, fake_scheduler, log_stream):
    fake_scheduler.set_stream_url(log_stream.url(RUNNING_UUID))  # never registered
    code, message = _error(_stream_url(zuul_web, 'tenant-one', RUNNING_UUID))
    assert code == 404 and 'no live log' in message
