"""doc/source/operations/web-builds.rst: its curl commands and its
websocket script run as printed against a real zuul-web (fake scheduler
over Gearman, SQLite history, a real executor log stream), with the
page's host and tenant swapped for the test's."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import subprocess
import threading

import pytest

from tests.fakes.scheduler_rpc import RUNNING_UUID
from tests.functional.test_web_build_pages import ReaderSignallingStream
from tests.harness.docs import code_blocks

PAGE = 'doc/source/operations/web-builds.rst'


def _local(text: str, web) -> str:
    return text.replace('localhost:9000', f'127.0.0.1:{web.port}').replace(
        "'localhost', 9000", f"'127.0.0.1', {web.port}").replace(
        '/tenant/example/', '/tenant/tenant-one/')


def _commands(block: str):
    """(command, expected output lines) of a console block."""
    entries = []
    for line in block.splitlines():
        if line.startswith('$ '):
            entries.append((line[2:], []))
        elif entries:
            entries[-1][1].append(line)
    return entries


@pytest.fixture
def running_build(fake_scheduler, tmp_path):
    """RUNNING_UUID streaming a two-line log; it ends once a reader came."""
    stream = ReaderSignallingStream()
    stream.start()
    log = tmp_path / 'job-output.txt'
    log.write_text('hello from the job\nsecond line\n')
    stream.register(RUNNING_UUID, str(log))
    fake_scheduler.set_stream_url(stream.url(RUNNING_UUID))

    def end_once_followed():
        stream.reader_arrived.wait(120)
        stream.finish(RUNNING_UUID)
    ender = threading.Thread(target=end_once_followed, daemon=True)
    ender.start()
    yield
    stream.reader_arrived.set()
    ender.join()
    stream.stop()


def test_history_commands(zuul_web):
    (block, _stream_block) = code_blocks(PAGE, 'console')
    (query, no_output), (bad, expected) = _commands(block)
    assert no_output == []
    out = subprocess.run(shlex.split(_local(query, zuul_web)), capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert [(b['change'], b['job_name']) for b in json.loads(out)] == [(1, 'project-test1')]
    out = subprocess.run(shlex.split(_local(bad, zuul_web)), capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert json.loads(out) == json.loads('\n'.join(expected))


def test_plain_http_live_log_command(zuul_web, running_build):
    (_block, stream_block) = code_blocks(PAGE, 'console')
    ((command, _),) = _commands(stream_block)
    out = subprocess.run(shlex.split(_local(command, zuul_web)), capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out == 'hello from the job\nsecond line\n'


def test_websocket_script(zuul_web, running_build):
    (script,) = code_blocks(PAGE, 'python')
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(_local(script, zuul_web), PAGE, 'exec'), {})  # noqa: S102 - the doc's own code
    assert printed.getvalue() == ('hello from the job\nsecond line\n'
                                  '[closed 1000: No more data]\n')
