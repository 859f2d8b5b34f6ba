"""The netns driver's configuration: real dynamic nodes on this machine,
each an sshd in its own network namespace (see host.py).

    - name: local-netns
      driver: netns
      authorized-keys-file: /var/lib/zuul/.ssh/id_ed25519.pub   # optional
      authorized-keys: ['ssh-ed25519 AAAA...']                   # optional
      subnet: 10.231.0.0/16      # optional, the default
      bridge: npbr0              # optional, the default
      state-dir: /var/tmp/gatekeep-netns
      diskimages:                 # optional: built images it takes uploads of
        - name: tiny              # a top-level diskimage with format tar
      pools:
        - name: main
          max-servers: 6
          labels:
            - name: ubuntu-jammy
              username: root
              rootfs: /path/to/image/root   # optional: sshd chrooted there
            - name: tiny-node
              diskimage: tiny     # boots the newest upload of that image

Without keys in the provider, the launcher user's ~/.ssh/*.pub are
authorized.  A node with a root filesystem (``rootfs`` or an uploaded
``diskimage``) runs sshd chrooted in a private overlay of it; uploads
are tarballs of a root filesystem, unpacked under
``<state-dir>/images/``.
"""

from __future__ import annotations

import ipaddress

import voluptuous as v

from nodepool.driver import Driver, unique_pools
from nodepool.driver.netns.adapter import NetnsAdapter
from nodepool.driver.netns.host import DEFAULT_BASE_DIR, DEFAULT_BRIDGE, DEFAULT_SUBNET
from nodepool.driver.settings import (
    ProviderConfig,
    ProviderDiskImage,
    common_pool,
    common_provider,
)
from nodepool.driver.settings import pool_schema as make_pool_schema
from nodepool.driver.settings import provider_schema as make_provider_schema

DEFAULT_USERNAME = 'root'


def _subnet(value):
    try:
        net = ipaddress.ip_network(value)
    except ValueError as e:
        raise v.Invalid(f'not a subnet: {e}') from None
    if net.version != 4 or net.num_addresses < 8:
        raise v.Invalid('subnet must be IPv4 with at least 8 addresses')
    return str(net)


def _bridge(value):
    if not isinstance(value, str) or not 1 <= len(value) <= 15:
        raise v.Invalid('bridge must be an interface name of 1 to 15 characters')
    return value


class NetnsDriver(Driver):
    name = 'netns'

    def provider_schema(self) -> v.Schema:
        pool = make_pool_schema(label={'rootfs': str, 'diskimage': str},
                                **{'max-servers': int})
        return make_provider_schema(pool, **{
            'diskimages': [{v.Required('name'): str, 'pause': bool, 'meta': dict}],
            'authorized-keys': [str],
            'authorized-keys-file': str,
            'subnet': _subnet,
            'bridge': _bridge,
            'state-dir': str,
        })

    def load_provider(self, raw: dict) -> ProviderConfig:
        unique_pools(raw)
        provider = common_provider(raw)
        provider.settings = {
            'authorized-keys': list(raw.get('authorized-keys') or []),
            'authorized-keys-file': raw.get('authorized-keys-file'),
            'subnet': raw.get('subnet', DEFAULT_SUBNET),
            'bridge': raw.get('bridge', DEFAULT_BRIDGE),
            'state-dir': raw.get('state-dir', DEFAULT_BASE_DIR),
        }
        for i, raw_image in enumerate(raw.get('diskimages') or []):
            name = raw_image['name']
            if name in provider.diskimages:
                raise v.Invalid(f'diskimage {name!r} is listed twice',
                                path=['diskimages', i, 'name'])
            provider.diskimages[name] = ProviderDiskImage(
                name=name, pause=raw_image.get('pause', False),
                meta=dict(raw_image.get('meta') or {}))
        for p, raw_pool in enumerate(raw['pools']):
            pool = common_pool(provider, raw_pool)
            for j, label in enumerate(pool.labels.values()):
                label.diskimage = label.settings.pop('diskimage', None)
                if not label.diskimage:
                    # Nodes of a built image log in as its diskimage's
                    # ``username`` unless the label says otherwise.
                    label.username = label.username or DEFAULT_USERNAME
                if label.diskimage and label.settings.get('rootfs'):
                    raise v.Invalid(f'label {label.name!r}: rootfs and diskimage are '
                                    'alternatives (a fixed root or a built image)',
                                    path=['pools', p, 'labels', j, 'diskimage'])
            provider.pools[pool.name] = pool
        return provider

    def get_adapter(self, provider: ProviderConfig) -> NetnsAdapter:
        return NetnsAdapter(provider)
