"""The netns node's sshd_config: which authorized_keys files a node's
sshd reads (zuul-jobs' add-build-sshkey adds the build's key to the node
user's ~/.ssh/authorized_keys)."""

from __future__ import annotations

from nodepool.driver.netns.host import sshd_config


def test_only_a_node_with_its_own_root_reads_its_users_authorized_keys():
    own = sshd_config('10.0.0.2', '/etc/nodepool-node', own_root=True)
    assert 'AuthorizedKeysFile /etc/nodepool-node/authorized_keys .ssh/authorized_keys\n' in own
    # without a root filesystem of its own, ~/.ssh is this machine's user's:
    # a key a job added there must never open the node (nor this machine)
    shared = sshd_config('10.0.0.2', '/state/n1', own_root=False)
    assert 'AuthorizedKeysFile /state/n1/authorized_keys\n' in shared
    assert '.ssh/authorized_keys' not in shared
    for text in (own, shared):
        assert 'PasswordAuthentication no\n' in text
        assert 'ListenAddress 10.0.0.2\n' in text


def test_a_node_without_its_own_root_has_its_own_home():
    # sessions on a node sharing this machine's files must not run this
    # machine's user's dotfiles (nor leave a job's ~ files in its HOME)
    shared = sshd_config('10.0.0.2', '/state/n1', own_root=False)
    assert 'SetEnv HOME=/state/n1/home\n' in shared
    own = sshd_config('10.0.0.2', '/etc/nodepool-node', own_root=True)
    assert 'SetEnv' not in own
