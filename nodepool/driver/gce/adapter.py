"""Google Compute Engine as a provider, through Google's API client
(``google-api-python-client``, its bundled Compute v1 discovery document)
and application default credentials (``google-auth``).

``create`` inserts an instance (the label's machine type, a boot disk
from the cloud image (by id, or the newest of its family), the default
network with an external address unless ``use-internal-ip``, the image's
``key`` as ``ssh-keys`` metadata, and the labels ``nodepool_node_id``,
``nodepool_provider_name``, ``nodepool_pool_name``); ``poll`` waits for
``RUNNING``, then for SSH and its host keys, within ``boot-timeout``; an
insert whose operation failed fails the launch with its error (quota
errors raise ``QuotaError``).  ``list`` finds instances by the provider
label; ``quota`` is the region's CPUS and INSTANCES quotas less what the
provider's own instances do not use.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

from nodepool.driver import (
    CachedQuota,
    Instance,
    InstanceSpec,
    LaunchError,
    ProviderAdapter,
    ProviderError,
    Quota,
    QuotaError,
    resource_name,
)
from nodepool.driver.settings import PoolConfig
from nodepool.driver.sshutil import reachability_problem

log = logging.getLogger('nodepool.driver.gce')

SCOPES = ['https://www.googleapis.com/auth/compute']
QUOTA_REASONS = ('quotaExceeded', 'QUOTA_EXCEEDED', 'ZONE_RESOURCE_POOL_EXHAUSTED',
                 'rateLimitExceeded')


def _http_error(what: str, e) -> ProviderError:
    try:
        body = json.loads(e.content or b'{}').get('error') or {}
    except ValueError:
        body = {}
    reasons = [x.get('reason') for x in body.get('errors') or []]
    text = f'{what}: {e.resp.status} {body.get("message") or e}'
    if any(r in QUOTA_REASONS for r in reasons):
        return QuotaError(text)
    if 400 <= int(e.resp.status) < 500:
        return LaunchError(text)
    return ProviderError(text)


class GceAdapter(CachedQuota, ProviderAdapter):
    check_ssh = False
    times_own_launch = True

    delete_timeout = 600.0

    def __init__(self, provider):
        super().__init__(provider)
        self.settings = provider.settings
        self._lock = threading.Lock()
        self._local = threading.local()
        self._creds = None
        self._types: dict[str, tuple[int, int]] = {}
        self._launches: dict[str, dict] = {}

    @property
    def compute(self):
        """The Compute client of this thread (httplib2, under Google's
        client, is not thread-safe: one client per launcher thread)."""
        compute = getattr(self._local, 'compute', None)
        if compute is None:
            compute = self._local.compute = self._connect()
        return compute

    def _credentials(self):
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
        with self._lock:
            if self._creds is None:
                try:
                    self._creds, _ = google.auth.default(scopes=SCOPES)
                except DefaultCredentialsError as e:
                    raise ProviderError(f'gce provider {self.provider.name}: {e}') from None
            return self._creds

    def _connect(self):
        from googleapiclient import discovery
        credentials = self._credentials()
        # Another endpoint: the zuul-launcher connection's ``endpoint_url``,
        # or gcloud's override variable (``.../compute/v1/``).
        endpoint = (self.settings.get('connection') or {}).get('endpoint-url') or \
            os.environ.get('CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE', '')
        if endpoint and 'compute/v1' not in endpoint:
            endpoint = endpoint.rstrip('/') + '/compute/v1/'
        options = {'api_endpoint': endpoint} if endpoint else None
        return discovery.build('compute', 'v1', credentials=credentials, cache_discovery=False,
                               static_discovery=True, client_options=options)

    def _call(self, what: str, request):
        from googleapiclient.errors import HttpError
        try:
            return request.execute(num_retries=2)
        except HttpError as e:
            raise _http_error(what, e) from None
        except OSError as e:
            raise ProviderError(f'{what}: {e}') from None

    @property
    def _where(self) -> dict:
        return {'project': self.settings['project'], 'zone': self.settings['zone']}

    def start(self) -> None:
        self.compute

    # -- what a label needs ---------------------------------------------------------------

    def machine_type(self, name: str) -> tuple[int, int]:
        with self._lock:
            known = self._types.get(name)
        if known is None:
            found = self._call(f'reading machine type {name}', self.compute.machineTypes().get(
                machineType=name, **self._where))
            known = (found['guestCpus'], found['memoryMb'])
            with self._lock:
                self._types[name] = known
        return known

    def label_quota(self, pool: PoolConfig, label: str) -> Quota:
        cores, ram = self.machine_type(pool.labels[label].settings['instance-type'])
        return Quota(instances=1, cores=cores, ram=ram)

    def _source_image(self, image: dict) -> str:
        project = image.get('image-project') or self.settings['project']
        if image.get('image-id'):
            return f'projects/{project}/global/images/{image["image-id"]}'
        found = self._call(f'finding the image of family {image["image-family"]}',
                           self.compute.images().getFromFamily(
                               project=project, family=image['image-family']))
        return found['selfLink']

    # -- launching --------------------------------------------------------------------------

    def instance_body(self, spec: InstanceSpec) -> dict:
        pool = self.provider.pools[spec.pool]
        settings = pool.labels[spec.label].settings
        image = self.settings['cloud-images'][settings['cloud-image']]
        zone = self.settings['zone']
        disk = {'sourceImage': self._source_image(image)}
        if settings.get('volume-size'):
            disk['diskSizeGb'] = str(settings['volume-size'])
        if settings.get('volume-type'):
            disk['diskType'] = f'zones/{zone}/diskTypes/{settings["volume-type"]}'
        interface: dict = {'network': 'global/networks/default'}
        if not pool.settings.get('use-internal-ip'):
            interface['accessConfigs'] = [{'type': 'ONE_TO_ONE_NAT', 'name': 'External NAT'}]
        body = {
            'name': resource_name(spec.provider, spec.node_id),
            'machineType': f'zones/{zone}/machineTypes/{settings["instance-type"]}',
            'disks': [{'boot': True, 'autoDelete': True, 'initializeParams': disk}],
            'networkInterfaces': [interface],
            'labels': {'nodepool_node_id': spec.node_id,
                       'nodepool_provider_name': resource_name(spec.provider),
                       'nodepool_pool_name': resource_name(spec.pool)},
        }
        if image.get('key'):
            username = image.get('username', 'zuul')
            body['metadata'] = {'items': [{'key': 'ssh-keys',
                                           'value': f'{username}:{image["key"]}'}]}
        return body

    def create(self, spec: InstanceSpec) -> str:
        body = self.instance_body(spec)
        operation = self._call(f'inserting instance {body["name"]}',
                               self.compute.instances().insert(body=body, **self._where))
        settings = self.provider.pools[spec.pool].labels[spec.label].settings
        image = self.settings['cloud-images'][settings['cloud-image']]
        with self._lock:
            self._launches[body['name']] = {
                'operation': operation.get('name'), 'started': time.monotonic(),
                'host-key-checking': self.provider.pools[spec.pool].settings.get(
                    'host-key-checking', True),
                'connection-type': image.get('connection-type', 'ssh'),
                'connection-port': image.get('connection-port', 22),
                'username': image.get('username')}
        return body['name']

    def _operation_error(self, name: str | None) -> ProviderError | None:
        if not name:
            return None
        op = self._call(f'reading operation {name}',
                        self.compute.zoneOperations().get(operation=name, **self._where))
        if op.get('status') != 'DONE' or not op.get('error'):
            return None
        errors = op['error'].get('errors') or [{}]
        text = '; '.join(f'{e.get("code")}: {e.get("message")}' for e in errors)
        if any(e.get('code') in QUOTA_REASONS for e in errors):
            return QuotaError(text)
        return LaunchError(text)

    def _get(self, name: str) -> dict | None:
        from googleapiclient.errors import HttpError
        try:
            return self.compute.instances().get(instance=name, **self._where).execute()
        except HttpError as e:
            if int(e.resp.status) == 404:
                return None
            raise _http_error(f'reading instance {name}', e) from None

    def poll(self, external_id: str) -> Instance | None:
        with self._lock:
            launch = self._launches.get(external_id)
        found = self._get(external_id)
        if found is None:
            error = self._operation_error((launch or {}).get('operation'))
            if error is not None:
                self._forget(external_id)
                raise error
            return None
        status = found.get('status')
        if status in ('PROVISIONING', 'STAGING'):
            return None
        if status != 'RUNNING':
            self._forget(external_id)
            raise LaunchError(f'instance {external_id} is {status}')
        inst = self._instance(found)
        if launch is None:
            inst.ready = True
            return inst
        inst.username = launch['username']
        inst.connection_type = launch['connection-type']
        inst.connection_port = launch['connection-port']
        if reachability_problem(inst, launch['host-key-checking']) is not None:
            return None   # the framework's boot-timeout ends the wait
        inst.ready = True
        self._forget(external_id)
        return inst

    def _forget(self, name: str) -> None:
        with self._lock:
            self._launches.pop(name, None)

    def _instance(self, found: dict) -> Instance:
        interface = (found.get('networkInterfaces') or [{}])[0]
        private = interface.get('networkIP')
        public = next((a.get('natIP') for a in interface.get('accessConfigs') or []
                       if a.get('natIP')), None)
        labels = found.get('labels') or {}
        pool = self.provider.pools.get(labels.get('nodepool_pool_name', ''))
        internal = bool(pool and pool.settings.get('use-internal-ip'))
        return Instance(external_id=found['name'], node_id=labels.get('nodepool_node_id'),
                        interface_ip=private if internal else (public or private),
                        public_ipv4=public, private_ipv4=private, hostname=found['name'],
                        region=self.settings['region'], az=self.settings['zone'],
                        host_id=str(found.get('id') or '') or None)

    # -- deleting and listing ---------------------------------------------------------------

    def delete(self, external_id: str) -> None:
        from googleapiclient.errors import HttpError
        self._forget(external_id)
        try:
            self.compute.instances().delete(instance=external_id, **self._where).execute()
        except HttpError as e:
            if int(e.resp.status) == 404:
                return
            raise _http_error(f'deleting instance {external_id}', e) from None
        deadline = time.monotonic() + self.delete_timeout
        delay = 0.05
        while self._get(external_id) is not None:
            if time.monotonic() + delay > deadline:
                raise ProviderError(f'instance {external_id} still exists '
                                    f'{self.delete_timeout}s after deleting it')
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _ours(self) -> list[dict]:
        found = self._call('listing instances', self.compute.instances().list(
            filter=f'labels.nodepool_provider_name = {resource_name(self.provider.name)}',
            **self._where))
        return found.get('items') or []

    def list(self) -> list[Instance]:
        return [Instance(external_id=i['name'],
                         node_id=(i.get('labels') or {}).get('nodepool_node_id'))
                for i in self._ours()]

    # -- quota -------------------------------------------------------------------------------

    def _fetch_quota(self) -> Quota:
        region = self._call('reading the region', self.compute.regions().get(
            project=self.settings['project'], region=self.settings['region']))
        ours = self._ours()
        own_cpus = sum(self.machine_type(i['machineType'].rsplit('/', 1)[-1])[0] for i in ours)
        quotas = {q['metric']: q for q in region.get('quotas') or []}

        def left(metric, own):
            q = quotas.get(metric)
            return None if q is None else q['limit'] - (q['usage'] - own)
        return Quota(instances=left('INSTANCES', len(ours)), cores=left('CPUS', own_cpus))
