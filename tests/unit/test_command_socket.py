"""The daemons' command socket: commands run, unknown ones are refused,
and a missing daemon is a clear error."""

from __future__ import annotations

import threading

import pytest

from zuul.lib.commandsocket import CommandSocket, send_command


def test_commands_run_and_unknown_ones_are_refused(tmp_path):
    paused = threading.Event()
    sock = CommandSocket(str(tmp_path / 'x.socket'), {'pause': paused.set,
                                                      'resume': lambda: None})
    sock.start()
    try:
        assert send_command(sock.path, 'pause') == 'ok'
        assert paused.wait(10)
        answer = send_command(sock.path, 'explode')
        assert answer == 'error: unknown command "explode" (known: pause, resume)'
    finally:
        sock.stop()
    with pytest.raises(OSError, match='no daemon is listening on'):
        send_command(sock.path, 'pause')


def test_stop_ends_the_accept_thread_before_the_socket_is_closed(tmp_path):
    # A thread left blocked in accept() on a closed descriptor is restarted
    # by the next signal (SIGCHLD) on that number, reused by then by another
    # listening socket, and steals its connections: stop() must end it.
    sock = CommandSocket(str(tmp_path / 'x.socket'), {'pause': lambda: None})
    sock.start()
    assert send_command(sock.path, 'pause') == 'ok'
    sock.stop()
    assert not sock._thread.is_alive()
    assert sock._sock.fileno() == -1
