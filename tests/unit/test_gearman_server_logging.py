"""``[gearman_server] log_config``: the Gearman server embedded in the
scheduler logs where that file (YAML dictConfig or INI fileConfig
format) says, and only its loggers do: the scheduler's own records stay
out of it, and the server's records stop going to the scheduler's log.

A real embedded server is started from zuul.conf by the scheduler
daemon's own code and a real gear client talks to it."""

from __future__ import annotations

import logging
import textwrap

import gear
import pytest

from nodepool.zk.localserver import free_port
from zuul.cmd import scheduler as scheduler_cmd
from zuul.configloader.zuulconf import load_zuul_conf
from zuul.lib.gearlib import SERVER_LOGGERS, GearClient
from zuul.lib.scoped_logging import LoggingConfigError
from zuul.scheduler.service import SchedulerService

YAML_CONFIG = """
version: 1
formatters:
  plain: {{format: 'GEARLOG %(name)s %(message)s'}}
handlers:
  file:
    class: logging.FileHandler
    filename: {log}
    formatter: plain
root:
  level: DEBUG
  handlers: [file]
loggers:
  zuul.scheduler: {{level: DEBUG, handlers: [file]}}
"""

INI_CONFIG = """
[loggers]
keys=root

[handlers]
keys=file

[formatters]
keys=plain

[logger_root]
level=INFO
handlers=file

[handler_file]
class=FileHandler
args=('{log}',)
formatter=plain

[formatter_plain]
format=GEARLOG %(name)s %(message)s
"""


@pytest.fixture(autouse=True)
def restore_server_loggers():
    """The loggers this configures are process-wide: put them back."""
    yield
    for name in SERVER_LOGGERS + ('zuul.scheduler',):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        logger.propagate = True
        logger.setLevel(logging.NOTSET)


def zuul_conf(tmp_path, log_config: str | None):
    lines = ['[gearman_server]', 'start=true', 'listen_address=127.0.0.1',
             f'port={free_port()}']
    if log_config is not None:
        lines.append(f'log_config={log_config}')
    lines += ['[scheduler]', f'tenant_config={tmp_path / "main.yaml"}',
              f'state_dir={tmp_path / "state"}', f'pidfile={tmp_path / "pid"}']
    path = tmp_path / 'zuul.conf'
    path.write_text('\n'.join(lines) + '\n')
    return path


def start_server_and_talk(conf) -> None:
    """The daemon's own start of the embedded server, then one round
    trip from a client (the server has accepted and logged it by then)."""
    service = SchedulerService(conf)
    service.start_gearman()
    client = GearClient('test')
    try:
        client.addServer('127.0.0.1', conf.gearman_server.port)
        client.waitForServer(30)
        client.active_connections[0].sendAdminRequest(gear.StatusAdminRequest(), timeout=30)
    finally:
        client.shutdown()
        service.gear_server.shutdown()


@pytest.mark.parametrize('name, text', [('gear.yaml', YAML_CONFIG),
                                        ('gear.conf', INI_CONFIG)])
def test_server_logs_follow_the_file_and_only_its_loggers_do(tmp_path, caplog, name,
                                                             text):
    log = tmp_path / 'gearman.log'
    config = tmp_path / name
    config.write_text(textwrap.dedent(text).format(log=log))
    conf = load_zuul_conf(str(zuul_conf(tmp_path, str(config))))
    caplog.set_level(logging.INFO)
    start_server_and_talk(conf)
    logging.getLogger('zuul.scheduler').warning('a scheduler record')
    written = log.read_text()
    assert 'GEARLOG zuul.GearServer Accepted connection' in written
    # The scheduler's loggers are not the file's to configure...
    assert 'a scheduler record' not in written
    assert 'a scheduler record' in caplog.text
    # ...and the server's records no longer reach the scheduler's log.
    assert 'Accepted connection' not in caplog.text


def test_without_the_key_the_server_logs_with_the_scheduler(tmp_path, caplog):
    conf = load_zuul_conf(str(zuul_conf(tmp_path, None)))
    caplog.set_level(logging.INFO)
    start_server_and_talk(conf)
    assert 'Accepted connection' in caplog.text


@pytest.mark.parametrize('text, error', [
    (None, 'No such file'),
    ('- just\n- a list\n', 'not a logging configuration'),
    ('root: {handlers: [missing]}\n', 'names handler missing'),
    ('handlers: {h: {class: no.such.Handler}}\nroot: {handlers: [h]}\n', 'handler h'),
    ('[loggers]\nkeys=root\n[logger_root]\nhandlers=h\n[handlers]\nkeys=h\n'
     '[handler_h]\nclass=NoSuchHandler\n', "'NoSuchHandler' is not defined"),
])
def test_a_bad_file_stops_the_scheduler_with_a_clear_error(tmp_path, capsys, text, error):
    config = tmp_path / ('gear.conf' if text and text.startswith('[') else 'gear.yaml')
    if text is not None:
        config.write_text(text)
    path = zuul_conf(tmp_path, str(config))
    # Refused before the scheduler detaches or starts anything.
    assert scheduler_cmd.main(['-c', str(path), '-d']) == 2
    err = capsys.readouterr().err
    assert '[gearman_server] log_config' in err and error in err and str(config) in err
    conf = load_zuul_conf(str(path))
    with pytest.raises(LoggingConfigError, match=error):
        SchedulerService(conf).start_gearman()
