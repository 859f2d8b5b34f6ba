"""Reports by email (smtplib).

The mail is sent on the connection's own thread, never on the
scheduler's loop: a mail server that is slow or gone (smtplib waits up
to 30 s to connect) must not stall every pipeline. The subject and the
text are made on the loop, when the report is asked for."""

from __future__ import annotations

import logging
import smtplib
from email.message import EmailMessage

from zuul.lib.ordered_worker import ReportWorker

log = logging.getLogger('zuul.driver.smtp')


class SMTPConnection(ReportWorker):
    driver_name = 'smtp'

    def __init__(self, name: str, options: dict):
        self.name = name
        self.server = options['server']
        self.port = int(options.get('port', 25))
        self.default_from = options.get('default_from', 'zuul')
        self.default_to = options.get('default_to', 'zuul')
        self.user = options.get('user')
        self.password = options.get('password')
        self.starttls = str(options.get('use_starttls', 'false')).lower() == 'true'

    def stop(self) -> None:
        self.stop_reports()

    def send(self, subject: str, body: str, to: str | None = None,
             from_: str | None = None) -> None:
        msg = EmailMessage()
        msg['Subject'] = subject
        msg['From'] = from_ or self.default_from
        msg['To'] = to or self.default_to
        msg.set_content(body)
        with smtplib.SMTP(self.server, self.port, timeout=30) as smtp:
            if self.starttls:
                smtp.starttls()
            if self.user:
                smtp.login(self.user, self.password or '')
            smtp.send_message(msg)


class SMTPReporter:
    def __init__(self, connection: SMTPConnection, config: dict | None):
        self.connection = connection
        self.config = dict(config or {})

    def _subject(self, item, pipeline) -> str:
        subject = self.config.get('subject', 'Report for change {change} against {pipeline}')
        try:
            return subject.format(change=item.change, pipeline=pipeline.name)
        except (KeyError, AttributeError, IndexError, ValueError):
            return subject

    def report(self, item, pipeline, action: str, message: str) -> None:
        self.connection.send(self._subject(item, pipeline), message, self.config.get('to'),
                             self.config.get('from'))

    def prepare_report(self, item, pipeline, action: str, message: str):
        """On the loop: the mail as it is now; returns what sends it (on
        the connection's thread, once the report's write-ahead landed)."""
        args = (self._subject(item, pipeline), message, self.config.get('to'),
                self.config.get('from'))
        connection = self.connection
        event_id, what = getattr(item, 'event_id', None), item.change.describe()

        def send() -> None:
            try:
                connection.send(*args)
            except Exception as exc:
                log.error('[e: %s] Unable to send the %s report of %s by email: %s',
                          event_id, action, what, exc)
        return lambda: connection.report_later(send)
