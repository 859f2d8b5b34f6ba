"""netns hosts as a provider: ``create`` builds a namespace with its own
address and sshd (NetnsHostManager) and returns once sshd answers.

Image uploads (from nodepool-builder) are tarballs of a root filesystem:
``upload_image`` unpacks one under ``<state-dir>/images/`` and returns
that directory as the image's external id; a node booted from it runs
sshd chrooted in its own overlay of that directory.  ``delete_image``
refuses while a node still runs on the image (the builder retries)."""

from __future__ import annotations

import glob
import ipaddress
import logging
import os
import shutil
import subprocess
import threading

from nodepool.driver import (
    Instance,
    InstanceSpec,
    LaunchError,
    ProviderAdapter,
    ProviderError,
    Quota,
    UploadSpec,
    instance_prefix,
)
from nodepool.driver.netns.host import (
    NetnsError,
    NetnsHost,
    NetnsHostManager,
    available,
    image_users,
)

IMAGE_FORMATS = ['tar', 'tgz']
log = logging.getLogger('nodepool.driver.netns')


class NetnsAdapter(ProviderAdapter):
    check_ssh = True

    def __init__(self, provider):
        super().__init__(provider)
        self.settings = provider.settings
        self.prefix = instance_prefix(provider.name)
        self.manager: NetnsHostManager | None = None
        self._hosts: dict[str, tuple[NetnsHost, InstanceSpec]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        why = available()
        if why:
            raise ProviderError(f'netns provider {self.provider.name}: {why}')
        self.manager = NetnsHostManager(base_dir=self.settings['state-dir'],
                                        subnet=self.settings['subnet'],
                                        bridge=self.settings['bridge'])

    def authorized_keys(self) -> list[str]:
        keys = list(self.settings.get('authorized-keys') or [])
        path = self.settings.get('authorized-keys-file')
        if path:
            try:
                with open(path) as f:
                    keys += [line.strip() for line in f if line.strip()]
            except OSError as e:
                raise ProviderError(f'cannot read authorized-keys-file {path}: '
                                    f'{e.strerror}') from None
        if not keys:
            for pub in sorted(glob.glob(os.path.expanduser('~/.ssh/*.pub'))):
                with open(pub) as f:
                    keys += [line.strip() for line in f if line.strip()]
        if not keys:
            raise ProviderError(f'netns provider {self.provider.name}: no key to authorize '
                                '(set authorized-keys or authorized-keys-file)')
        return keys

    def create(self, spec: InstanceSpec) -> str:
        if self.manager is None:
            self.start()
        rootfs = spec.label_settings.get('rootfs')
        if spec.image is not None:
            rootfs = self._image_dir(spec.image.external_id)
            if not os.path.isdir(rootfs):
                raise LaunchError(f'image {spec.image.image_id} ({rootfs}) is not here')
        try:
            host = self.manager.create(spec.name, self.authorized_keys(),
                                       timeout=self.provider.boot_timeout, rootfs=rootfs)
        except NetnsError as e:
            raise LaunchError(str(e)) from None
        with self._lock:
            self._hosts[spec.name] = (host, spec)
        return spec.name

    def poll(self, external_id: str) -> Instance | None:
        with self._lock:
            entry = self._hosts.get(external_id)
        if entry is None:
            raise LaunchError(f'{external_id} is not a host of this launcher')
        host, spec = entry
        return Instance(external_id=external_id, node_id=spec.node_id, ready=True,
                        interface_ip=host.address, private_ipv4=host.address,
                        public_ipv4=host.address, hostname=host.name,
                        connection_port=host.port, username=spec.username or host.username,
                        host_keys=list(host.host_keys), region='local')

    def delete(self, external_id: str) -> None:
        if self.manager is None:
            self.start()
        with self._lock:
            entry = self._hosts.pop(external_id, None)
        self.manager.delete(entry[0] if entry else external_id)

    def list(self) -> list[Instance]:
        if self.manager is None:
            self.start()
        return [Instance(external_id=name, node_id=name[len(self.prefix):])
                for name in self.manager.list(self.prefix)]

    def quota(self) -> Quota:
        size = ipaddress.ip_network(self.settings['subnet']).num_addresses
        return Quota(instances=max(size - 3, 0))

    # -- images --------------------------------------------------------------

    @property
    def images_dir(self) -> str:
        return os.path.join(self.settings['state-dir'], 'images')

    def _image_dir(self, external_id: str) -> str:
        """The directory of an upload; refuses ids outside our images dir."""
        path = os.path.realpath(external_id)
        if os.path.dirname(path) != os.path.realpath(self.images_dir):
            raise ProviderError(f'{external_id} is not an image of provider '
                                f'{self.provider.name}')
        return path

    def image_formats(self) -> list[str]:
        return list(IMAGE_FORMATS)

    def upload_image(self, spec: UploadSpec) -> str:
        fmt = next((f for f in IMAGE_FORMATS if f in spec.files), None)
        if fmt is None:
            raise ProviderError(f'netns provider {self.provider.name} takes '
                                f'{" or ".join(IMAGE_FORMATS)} images; the build has '
                                f'{", ".join(sorted(spec.files)) or "no files"}')
        target = os.path.join(self.images_dir, f'{spec.upload_name}-{spec.upload_id}')
        partial = target + '.partial'
        shutil.rmtree(partial, ignore_errors=True)
        os.makedirs(partial, mode=0o755)
        # Unpacked beside its final name and renamed when complete, so a
        # launch never sees half an image.
        proc = subprocess.run(['tar', '--numeric-owner', '-xpf', spec.files[fmt], '-C',
                               partial], capture_output=True, text=True)
        if proc.returncode:
            shutil.rmtree(partial, ignore_errors=True)
            raise ProviderError(f'unpacking {spec.files[fmt]} failed: '
                                f'{proc.stderr.strip()[-500:]}')
        shutil.rmtree(target, ignore_errors=True)
        os.rename(partial, target)
        return target

    def delete_image(self, external_id: str) -> None:
        try:
            path = self._image_dir(external_id)
        except ProviderError:
            # Not under our images dir (state-dir was changed): never
            # delete elsewhere; for this provider it is gone.
            log.warning('Provider %s: image %s is not in %s; not deleting it there',
                        self.provider.name, external_id, self.images_dir)
            return
        users = sorted(name for name, rootfs in image_users(self.settings['state-dir']).items()
                       if os.path.realpath(rootfs) == path)
        if users:
            raise ProviderError(f'image {external_id} is in use by {", ".join(users)}')
        shutil.rmtree(path, ignore_errors=True)
