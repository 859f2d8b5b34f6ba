"""The ``smtp`` reporter sends its mail on the connection's own thread:
a mail server that accepts the connection and never answers (smtplib
waits 30 s for its greeting) holds that thread, never the scheduler's
loop, so every other pipeline keeps moving. A server that answers gets
the mail as released Zuul sends it. A real SMTP conversation over TCP
with a stand-in server; the real Scheduler, managers and Layouts."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.harness.waiting import wait_for
from tests.unit.scheduler_support import ONE_CONFIG_PROJECT, start_system
from zuul.driver.registry import default_registry

MAIN = ONE_CONFIG_PROJECT

CONFIG = """
- pipeline:
    name: check
    manager: independent
    trigger: {}
    success:
      mail:
        to: dev@example.com
- pipeline:
    name: other
    manager: independent
    trigger: {}
- job:
    name: base
    parent: null
- job:
    name: unit
- project:
    check:
      jobs: [unit]
    other:
      jobs: [unit]
"""


class SMTPServer:
    """Speaks the server's side of SMTP (``answer``) or accepts and says
    nothing (a server that hangs). ``mails``: (recipients, text)."""

    def __init__(self, answer: bool = True):
        self.answer = answer
        self.mails: list[tuple[list, str]] = []
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)
            if self.answer:
                threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn) -> None:
        reader = conn.makefile('rb')
        conn.sendall(b'220 mail.example.com ESMTP\r\n')
        recipients = []
        for line in reader:
            verb = line.decode().strip().split(' ')[0].upper()
            if verb in ('EHLO', 'HELO'):
                conn.sendall(b'250 mail.example.com\r\n')
            elif verb == 'RCPT':
                recipients.append(line.decode().strip().split(':', 1)[1].strip('<> '))
                conn.sendall(b'250 OK\r\n')
            elif verb == 'DATA':
                conn.sendall(b'354 go ahead\r\n')
                text = b''
                for data in reader:
                    if data == b'.\r\n':
                        break
                    text += data
                self.mails.append((recipients, text.decode()))
                conn.sendall(b'250 queued\r\n')
            elif verb == 'QUIT':
                conn.sendall(b'221 bye\r\n')
                break
            else:
                conn.sendall(b'250 OK\r\n')
        conn.close()

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def _mail_connection(server: SMTPServer):
    connection = default_registry().get('smtp').get_connection(
        'mail', {'server': '127.0.0.1', 'port': server.port, 'default_from': 'zuul@example.com'})
    connection.driver_name = 'smtp'
    return connection


def _check_succeeds(tmp_path, connection):
    """A system whose check pipeline mails its success report through
    ``connection``; one item enqueued there and its build succeeded."""
    scheduler, executor = start_system(tmp_path, MAIN, {'org/config': {'master': CONFIG}},
                                       connections=[connection])
    scheduler.management('enqueue-ref', tenant='t1', pipeline='check', project='org/config',
                         ref='refs/heads/master', oldrev='0' * 40, newrev='b' * 40)
    wait_for(lambda: len(executor.running) == 1, timeout=30, what='the check build')
    executor.finish(executor.running[0][0], 'SUCCESS')
    return scheduler, executor


@pytest.fixture
def hanging():
    server = SMTPServer(answer=False)
    yield server
    server.close()


def test_a_mail_server_that_never_answers_stalls_no_pipeline(tmp_path, hanging):
    connection = _mail_connection(hanging)
    scheduler, executor = _check_succeeds(tmp_path, connection)
    try:
        wait_for(lambda: hanging.accepted, timeout=30, what='the mail server reached')
        # The mail now waits for a greeting that never comes; the loop
        # goes on: another pipeline's item gets its build.
        scheduler.management('enqueue-ref', tenant='t1', pipeline='other', project='org/config',
                             ref='refs/heads/master', oldrev='0' * 40, newrev='c' * 40)
        wait_for(lambda: len(executor.running) == 1, timeout=10,
                 what='the other pipeline\'s build while the mail hangs')
        assert connection.workers_busy() == 1      # the mail, still being sent
        assert not scheduler.wait_until_settled(0.5), 'settled with a mail unsent'
    finally:
        hanging.close()     # the mail fails (logged), its thread is free again
        wait_for(lambda: connection.workers_busy() == 0, timeout=30, what='the mail given up')
        executor.finish_all()
        scheduler.stop()
        connection.stop()


def test_the_report_mail_reaches_the_server(tmp_path):
    server = SMTPServer()
    connection = _mail_connection(server)
    scheduler, executor = _check_succeeds(tmp_path, connection)
    try:
        assert scheduler.wait_until_settled(60)     # counts the mail being sent
        [(recipients, text)] = server.mails
        assert recipients == ['dev@example.com']
        assert 'Subject: Report for change' in text and 'against check' in text
        assert 'From: zuul@example.com' in text
        assert 'Build succeeded.' in text
    finally:
        executor.finish_all()
        scheduler.stop()
        connection.stop()
        server.close()
