"""Per-project SSH keys end to end (seed 000's "CD to a fixed host"): the
scheduler keeps the key pair in ZooKeeper, zuul-web serves the public key
at /api/tenant/<t>/project-ssh-key/<project>.pub, and the project's
post-review jobs find the private key in their build's ssh-agent and
deploy with it to a real sshd (its own network namespace) that accepts
that key and no other. The same job in check (pre-review) gets no key
and is refused by the host."""

from __future__ import annotations

import os
import urllib.request

from tests.functional.system_support import zuul_system  # noqa: F401 - fixture
from tests.harness.waiting import wait_for

DEPLOY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: The keys of the build's ssh-agent
      command: ssh-add -L
      register: agent
      failed_when: false
    - name: Deploy to the fixed host (it accepts the project key only)
      command: >-
        ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
        -o IdentitiesOnly=no -p {{ target_port }} {{ target_user }}@{{ target_host }}
        touch {{ target_marker }}-{{ zuul.pipeline }}
      register: deploy
      failed_when: false
    - zuul_return:
        data:
          agent_keys: "{{ agent.stdout_lines }}"
          deploy_rc: "{{ deploy.rc }}"
"""

APP = """
- project:
    check:
      jobs: [deploy]
    post:
      jobs: [deploy]
"""


def _deploy_job(host, marker) -> str:
    return f"""
        - job:
            name: deploy
            run: playbooks/deploy.yaml
            vars:
              target_host: {host.address}
              target_port: {host.port}
              target_user: {host.username}
              target_marker: {marker}
        """


def test_post_review_job_deploys_with_the_project_key_check_cannot(
        zuul_system, netns_manager, tmp_path, caplog):  # noqa: F811
    from nodepool.zk.localserver import free_port
    from zuul.cmd.web import WebSettings, build_web
    caplog.set_level('DEBUG')
    system = zuul_system
    target = netns_manager.create(f't{os.getpid()}-cd', [])   # accepts no key yet
    marker = tmp_path / 'deployed'
    try:
        system.create_projects(app_config=APP, config_files={
            'zuul.d/deploy.yaml': _deploy_job(target, marker),
            'playbooks/deploy.yaml': DEPLOY})
        system.start()
        port = free_port()
        web, rpc = build_web(WebSettings(gearman_port=system.conf.gearman.port, port=port))
        web.start()
        try:
            url = f'http://127.0.0.1:{port}/api/tenant/example/project-ssh-key/org/app.pub'
            with urllib.request.urlopen(url, timeout=60) as r:
                assert r.headers['Content-Type'].startswith('text/plain')
                public = r.read().decode()
        finally:
            web.stop()
            rpc.shutdown()
        assert public.startswith('ssh-rsa ') and public.count('\n') == 1
        # The fixed host trusts the project's key (as an operator would do).
        with open(os.path.join(target.state_dir, 'authorized_keys'), 'w') as f:
            f.write(public)

        change = system.store.create_change('org/app', 'master', 'Try', {'a.txt': '1\n'})
        wait_for(lambda: system.verified(change) != 0, timeout=240, what='the check vote')
        system.store.push_branch('org/app', 'master', {'b.txt': '1\n'})
        wait_for(lambda: _finished(system, 'post'), timeout=240, what='the post build')
        system.settle()
        check, post = _build(system, 'check'), _build(system, 'post')
        key = public.split()[1]
        assert check.result == 'SUCCESS' and post.result == 'SUCCESS'
        assert not any(key in line for line in check.result_data['agent_keys'])
        assert [line for line in post.result_data['agent_keys'] if key in line]
        assert str(check.result_data['deploy_rc']) != '0'
        assert str(post.result_data['deploy_rc']) == '0'
        assert os.path.exists(f'{marker}-post') and not os.path.exists(f'{marker}-check')
        # Nothing of ours logged it, at any level, in any daemon of this
        # process (kazoo's own DEBUG lines show znode data as stored, which
        # [keystore] password encrypts: as for the secrets keys).
        assert not [r for r in caplog.records if 'PRIVATE KEY' in r.getMessage() and
                    not r.name.startswith('kazoo')]
        assert not [r for r in caplog.records if 'OPENSSH PRIVATE KEY' in r.getMessage()]
    finally:
        netns_manager.delete(target)


def _launched(system, pipeline):
    return [(launch, build) for launch, build in zip(system.launches, system.builds)
            if launch['pipeline'] == pipeline]


def _finished(system, pipeline) -> bool:
    return any(build.result for _, build in _launched(system, pipeline))


def _build(system, pipeline):
    (build,) = [build for _, build in _launched(system, pipeline)]
    return build

