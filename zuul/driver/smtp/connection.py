"""Reports by email (smtplib)."""

from __future__ import annotations

import logging
import smtplib
from email.message import EmailMessage

log = logging.getLogger('zuul.driver.smtp')


class SMTPConnection:
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

    def report(self, item, pipeline, action: str, message: str) -> None:
        change = item.change
        subject = self.config.get('subject', 'Report for change {change} against {pipeline}')
        try:
            subject = subject.format(change=change, pipeline=pipeline.name)
        except (KeyError, AttributeError, IndexError, ValueError):
            pass
        self.connection.send(subject, message, self.config.get('to'),
                             self.config.get('from'))
