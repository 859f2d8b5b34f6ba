"""zuul-web's entry point: settings from zuul.conf and the wiring."""

import configparser
import json
import urllib.request

from zuul.cmd.web import WebSettings, build_web


def test_settings_from_zuul_conf(tmp_path, gearman_server, fake_scheduler):
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
