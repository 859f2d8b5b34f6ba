"""A daemon's command socket: a unix socket taking one-word commands
(``stop``, ``pause``, ``resume``, ``graceful``, ``full-reconfigure``...),
as released Zuul daemons have, so ``zuul-executor pause`` and friends work
on the same host without signals or pid files.

The protocol is a line: the command, newline. The answer is a line:
``ok`` or ``error: <reason>``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

log = logging.getLogger('zuul.commandsocket')


class CommandSocket:
    def __init__(self, path: str, handlers: dict):
        self.path = path
        self.handlers = handlers
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._running = False

    def start(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        if os.path.exists(self.path):
            os.unlink(self.path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        os.chmod(self.path, 0o600)
        self._sock.listen(4)
        self._running = True
        self._thread = threading.Thread(target=self._run, name='command-socket', daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting commands and wait for the accept thread.

        The listening socket is shut down here but closed by the accept
        thread once it has left ``accept()``. Closing it here instead would
        leave that thread blocked in ``accept()`` on the old descriptor
        number (``close()`` does not wake it on Linux); a signal (SIGCHLD
        when any subprocess exits) then restarts the call on the same
        number, by then reused by another listening socket in the process,
        whose connections the stale thread would accept and drop.
        """
        self._running = False
        if self._sock is not None:
            try:
                # wakes a blocked accept() with EINVAL; later ones fail too
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def _run(self) -> None:
        try:
            while self._running:
                try:
                    conn, _ = self._sock.accept()
                except OSError:
                    return
                if not self._running:
                    conn.close()
                    return
                with conn:
                    conn.settimeout(10.0)
                    try:
                        command = conn.makefile('r').readline().strip()
                        answer = self._dispatch(command)
                        conn.sendall(answer.encode() + b'\n')
                    except OSError:
                        continue
        finally:
            self._sock.close()

    def _dispatch(self, command: str) -> str:
        handler = self.handlers.get(command)
        if handler is None:
            return f'error: unknown command "{command}" (known: ' \
                f'{", ".join(sorted(self.handlers))})'
        log.info('Command socket: %s', command)
        try:
            # Commands that stop the daemon must not wait for themselves.
            threading.Thread(target=handler, name=f'command-{command}', daemon=True).start()
        except Exception as e:  # pragma: no cover - thread creation failure
            return f'error: {e}'
        return 'ok'


def send_command(path: str, command: str, timeout: float = 30.0) -> str:
    """Send ``command``; returns the daemon's answer. Raises OSError with a
    clear message when nothing listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
        except OSError as e:
            raise OSError(f'no daemon is listening on {path} ({e.strerror or e})') from None
        sock.sendall(command.encode() + b'\n')
        return sock.makefile('r').readline().strip()
    finally:
        sock.close()


def run_command(prog: str, path: str, command: str) -> int:
    """``<daemon> stop`` and the like: send ``command``, print the answer
    (or why nothing answered, on stderr); 0 when the daemon said ok."""
    import sys
    try:
        answer = send_command(path, command)
    except OSError as e:
        print(f'{prog}: {e}', file=sys.stderr)
        return 1
    print(answer)
    return 0 if answer == 'ok' else 1
