"""doc/source/operations/durable-state.rst as printed: the standalone
Gearman server command runs and serves Gearman, and the zuul.conf
fragment for several schedulers loads with the embedded server off."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time

from nodepool.zk.localserver import free_port
from tests.harness.docs import code_blocks

PAGE = 'doc/source/operations/durable-state.rst'


def test_geard_command_serves_gearman():
    import gear
    (console,) = code_blocks(PAGE, 'console')
    argv = shlex.split(console.strip())
    assert argv[0] == 'geard' and argv[argv.index('-p') + 1] == '4730'
    port = free_port()
    argv[argv.index('-p') + 1] = str(port)
    argv[0] = os.path.join(os.path.dirname(sys.executable), 'geard')
    proc = subprocess.Popen(argv + ['--listen-address', '127.0.0.1'],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = gear.Client('doc-test')
    try:
        time.sleep(0.3)
        assert proc.poll() is None, 'geard exited'
        client.addServer('127.0.0.1', port)
        client.waitForServer(timeout=20)
    finally:
        client.shutdown()
        proc.terminate()
        proc.wait(10)


def test_several_schedulers_conf_fragment_loads(tmp_path):
    from zuul.configloader.zuulconf import load_zuul_conf
    from zuul.driver.registry import default_registry
    (ini,) = code_blocks(PAGE, 'ini')
    path = tmp_path / 'zuul.conf'
    path.write_text(ini + '\n[zookeeper]\nhosts = 127.0.0.1:2181\n')
    conf = load_zuul_conf(str(path), default_registry())
    assert conf.gearman.server == 'gearman.example.org'
    assert conf.gearman.port == 4730
    assert conf.gearman_server.start is False
