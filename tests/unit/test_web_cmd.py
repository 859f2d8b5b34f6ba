"""zuul-web's entry point: settings from zuul.conf and the wiring."""

import configparser
import json
import urllib.request

import pytest

from zuul.cmd.web import WebSettings, build_web
from zuul.lib import rpc_protocol as p
from zuul.lib.rpc import RPCListener


@pytest.fixture
def auth_rules(gearman_server):
    """zuul-web asks the scheduler for the tenants' authorization rules
    on every tenant request; the stand-in scheduler serves none."""
    listener = RPCListener('127.0.0.1', gearman_server.port, {
        p.AUTH_RULES: lambda r: {'tenants': {}, 'rules': {}, 'api_root': None}})
    listener.start()
    yield listener
    listener.stop()


def test_settings_from_zuul_conf(tmp_path, gearman_server, fake_scheduler, auth_rules):
    config = configparser.ConfigParser()
    config.read_string(f"""
[gearman]
server=127.0.0.1
port={gearman_server.port}
[web]
listen_address=127.0.0.1
port=0
[database]
dburi=sqlite:///{tmp_path}/history.db
""")
    settings = WebSettings.from_config(config)
    assert (settings.gearman_port, settings.port) == (gearman_server.port, 0)
    web, rpc = build_web(settings)
    web.start()
    try:
        with urllib.request.urlopen(f'http://127.0.0.1:{web.port}/api/info') as r:
            assert json.loads(r.read())['info']['capabilities']['job_history'] is True
        # the schema was migrated before serving: an empty history, not an error
        with urllib.request.urlopen(
                f'http://127.0.0.1:{web.port}/api/tenant/tenant-one/builds') as r:
            assert json.loads(r.read()) == []
    finally:
        web.stop()
        rpc.shutdown()


def test_defaults_without_sections():
    settings = WebSettings.from_config(configparser.ConfigParser())
    assert (settings.listen_address, settings.port, settings.dburi) == ('127.0.0.1', 9000, None)


# -- [web] static_cache_expiry and command_socket ------------------------------------------


def _web_config(tmp_path, gearman_port, extra=''):
    config = configparser.ConfigParser()
    config.read_string(f"""
[gearman]
server=127.0.0.1
port={gearman_port}
[web]
listen_address=127.0.0.1
port=0
command_socket={tmp_path}/web.socket
{extra}
""")
    return config


def _headers(url):
    with urllib.request.urlopen(url) as r:
        r.read()
        return r.headers


def test_static_cache_expiry_sets_max_age_of_static_files(tmp_path, gearman_server):
    import pytest
    for extra, expected in (('', 3600), ('static_cache_expiry=120', 120),
                            ('static_cache_expiry=0', 0)):
        web, rpc = build_web(WebSettings.from_config(
            _web_config(tmp_path, gearman_server.port, extra)))
        web.start()
        try:
            base = f'http://127.0.0.1:{web.port}'
            assert _headers(f'{base}/static/zuul.css')['Cache-Control'] == \
                f'public, max-age={expected}'
            # Only static files: pages are revalidated every time.
            assert _headers(f'{base}/')['Cache-Control'] == 'no-cache'
        finally:
            web.stop()
            rpc.shutdown()
    with pytest.raises(ValueError, match=r'\[web\] static_cache_expiry must be .* "soon"'):
        WebSettings.from_config(_web_config(tmp_path, 1, 'static_cache_expiry=soon'))


def test_command_socket_stops_zuul_web(tmp_path, gearman_server):
    import os
    import subprocess
    import sys

    from tests.harness.waiting import wait_for
    conf = tmp_path / 'zuul.conf'
    with open(conf, 'w') as f:
        _web_config(tmp_path, gearman_server.port).write(f)
    command = [sys.executable, '-m', 'zuul.cmd.web', '-c', str(conf)]
    # Nothing listens yet: a clear error.
    idle = subprocess.run(command + ['stop'], capture_output=True, text=True, timeout=60)
    assert idle.returncode == 1 and 'no daemon is listening on' in idle.stderr
    web = subprocess.Popen(command + ['-d'], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        socket_path = str(tmp_path / 'web.socket')
        wait_for(lambda: os.path.exists(socket_path) or web.poll() is not None, 60,
                 what='the command socket')
        assert web.poll() is None
        sent = subprocess.run(command + ['stop'], capture_output=True, text=True,
                              timeout=60)
        assert (sent.returncode, sent.stdout.strip()) == (0, 'ok')
        assert web.wait(60) == 0
    finally:
        if web.poll() is None:
            web.kill()
            web.wait()
