"""An AWS account's EC2 as a provider, through boto3.

A launch: ``create`` resolves the image (the builder's upload, a cloud
image by id, or the newest image matching its filters), then
RunInstances with the label's instance type, key pair, volume, user
data, instance profile, spot option and tags, in the pool's subnet and
security group; the instance and its volumes carry the tags
``nodepool_node_id``, ``nodepool_provider_name``, ``nodepool_pool_name``
(and the label's ``tags``/``dynamic-tags``).  ``poll`` waits for
``running`` within ``launch-timeout``, then for SSH and its host keys
within ``boot-timeout``.  ``list`` finds instances by the provider tag
(leak cleanup deletes those without a node); ``cleanup_leaks`` deletes
unattached volumes with it.

``quota`` is the account's vCPU quota for on-demand standard instances
(Service Quotas ``L-1216C47A``) less the vCPUs of instances that are not
this provider's; the account refusing a launch for capacity or limits
(``VcpuLimitExceeded``, ``InsufficientInstanceCapacity`` ...) raises
``QuotaError``.  Throttled calls are retried by botocore's adaptive
retry mode (client-side rate limiting) besides the provider's ``rate``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from nodepool.driver import (
    CachedQuota,
    Instance,
    InstanceSpec,
    LaunchError,
    ProviderAdapter,
    ProviderError,
    Quota,
    QuotaError,
)
from nodepool.driver.settings import PoolConfig
from nodepool.driver.sshutil import reachability_problem

log = logging.getLogger('nodepool.driver.aws')

VCPU_QUOTA = ('ec2', 'L-1216C47A')
QUOTA_CODES = ('VcpuLimitExceeded', 'InsufficientInstanceCapacity', 'InstanceLimitExceeded',
               'MaxSpotInstanceCountExceeded', 'InsufficientFreeAddressesInSubnet')
ALIVE_STATES = ('pending', 'running', 'stopping', 'stopped')


def _code(e: ClientError) -> str:
    return e.response.get('Error', {}).get('Code', '')


def _error(what: str, e: Exception) -> ProviderError:
    if isinstance(e, ClientError):
        code = _code(e)
        message = e.response.get('Error', {}).get('Message', '')
        text = f'{what}: {code}: {message}'
        status = e.response.get('ResponseMetadata', {}).get('HTTPStatusCode', 500)
        if code in QUOTA_CODES:
            return QuotaError(text)
        if 400 <= status < 500 and code not in ('RequestLimitExceeded', 'Throttling'):
            return LaunchError(text)
        return ProviderError(text)
    return ProviderError(f'{what}: {e}')


def tags_of(obj: dict) -> dict:
    return {t['Key']: t['Value'] for t in obj.get('Tags') or []}


@dataclass
class _Launch:
    spec: InstanceSpec
    username: str | None
    connection_type: str
    connection_port: int
    host_key_checking: bool
    started: float
    running_at: float | None = None


class AwsAdapter(CachedQuota, ProviderAdapter):
    check_ssh = False        # poll waits for SSH itself, to scan the host keys
    times_own_launch = True  # launch-timeout to running, boot-timeout to SSH

    delete_timeout = 600.0
    image_cache_seconds = 300.0

    def __init__(self, provider):
        super().__init__(provider)
        self.settings = provider.settings
        self._lock = threading.Lock()
        self._ec2 = None
        self._quotas = None
        self._launches: dict[str, _Launch] = {}
        self._types: dict[str, tuple[int, int]] = {}
        self._images: dict[str, tuple[str, float]] = {}

    # -- clients ---------------------------------------------------------------------

    def _session(self):
        """boto3's session: the profile (and, under zuul-launcher, the
        connection's credentials and endpoint); else boto3's own search
        (environment, shared files, the instance's role)."""
        conn = self.settings.get('connection') or {}
        if conn.get('shared-credentials-file'):
            os.environ.setdefault('AWS_SHARED_CREDENTIALS_FILE',
                                  conn['shared-credentials-file'])
        return boto3.session.Session(
            profile_name=conn.get('profile') or self.settings.get('profile-name'),
            region_name=self.settings['region-name'],
            aws_access_key_id=conn.get('access-key-id'),
            aws_secret_access_key=conn.get('secret-access-key'))

    def _client(self, session, service: str, config):
        endpoint = (self.settings.get('connection') or {}).get('endpoint-url')
        return session.client(service, config=config, endpoint_url=endpoint or None)

    @property
    def ec2(self):
        with self._lock:
            if self._ec2 is None:
                config = Config(retries={'mode': 'adaptive', 'max_attempts': 5},
                                user_agent_extra='gatekeep-ci-nodepool')
                try:
                    session = self._session()
                    self._ec2 = self._client(session, 'ec2', config)
                    self._quotas = self._client(session, 'service-quotas', config)
                except BotoCoreError as e:
                    raise ProviderError(f'aws provider {self.provider.name}: {e}') from None
            return self._ec2

    def _call(self, what: str, fn, **kwargs):
        try:
            return fn(**kwargs)
        except (ClientError, BotoCoreError) as e:
            raise _error(what, e) from None

    def start(self) -> None:
        self.ec2

    def stop(self) -> None:
        with self._lock:
            self._ec2 = self._quotas = None

    # -- what a label needs ---------------------------------------------------------------

    def instance_type(self, name: str) -> tuple[int, int]:
        """(vCPUs, MiB) of an instance type, from DescribeInstanceTypes."""
        with self._lock:
            known = self._types.get(name)
        if known is not None:
            return known
        found = self._call(f'describing instance type {name}',
                           self.ec2.describe_instance_types, InstanceTypes=[name])
        types = found.get('InstanceTypes') or []
        if not types:
            raise LaunchError(f'provider {self.provider.name}: no instance type {name!r}')
        info = (types[0]['VCpuInfo']['DefaultVCpus'], types[0]['MemoryInfo']['SizeInMiB'])
        with self._lock:
            self._types[name] = info
        return info

    def label_quota(self, pool: PoolConfig, label: str) -> Quota:
        settings = pool.labels[label].settings
        cores, ram = self.instance_type(settings['instance-type'])
        return Quota(instances=1, cores=cores, ram=ram)

    def _image(self, spec: InstanceSpec, settings: dict) -> tuple[str, dict]:
        if settings.get('diskimage'):
            if spec.image is None:
                raise LaunchError(f'diskimage {settings["diskimage"]!r} has no ready upload '
                                  f'to {self.provider.name}')
            return spec.image.external_id, self.provider.diskimages[
                settings['diskimage']].settings
        image = self.settings['cloud-images'][settings['cloud-image']]
        if image.get('image-id'):
            return image['image-id'], image
        return self._filtered_image(image), image

    def _filtered_image(self, image: dict) -> str:
        key = repr(image.get('image-filters'))
        now = time.monotonic()
        with self._lock:
            cached = self._images.get(key)
        if cached is not None and now - cached[1] < self.image_cache_seconds:
            return cached[0]
        filters = [{'Name': f['name'], 'Values': list(f['values'])}
                   for f in image.get('image-filters') or []]
        found = self._call(f'finding image {image["name"]}', self.ec2.describe_images,
                           Filters=filters).get('Images') or []
        if not found:
            raise LaunchError(f'provider {self.provider.name}: no image matches the filters '
                              f'of cloud-image {image["name"]!r}')
        newest = max(found, key=lambda i: (i.get('CreationDate') or '', i['ImageId']))
        with self._lock:
            self._images[key] = (newest['ImageId'], now)
        return newest['ImageId']

    # -- launching ----------------------------------------------------------------------

    def _tags(self, spec: InstanceSpec, settings: dict) -> list[dict]:
        tags = {str(k): str(val) for k, val in (settings.get('tags') or {}).items()}
        fields = SimpleNamespace(**(spec.request or {}))
        for key, template in (settings.get('dynamic-tags') or {}).items():
            try:
                tags[str(key)] = str(template.format(request=fields))
            except (AttributeError, KeyError, IndexError, ValueError) as e:
                log.warning('Node %s: dynamic tag %s left out: %r', spec.node_id, key, e)
        tags.update({'Name': spec.name, 'nodepool_node_id': spec.node_id,
                     'nodepool_provider_name': spec.provider,
                     'nodepool_pool_name': spec.pool, 'nodepool_node_label': spec.label})
        return [{'Key': k, 'Value': val} for k, val in tags.items()]

    def run_request(self, spec: InstanceSpec) -> tuple[dict, dict]:
        """The arguments of RunInstances for ``spec``, and its image's settings."""
        pool = self.provider.pools[spec.pool]
        settings = pool.labels[spec.label].settings
        image_id, image = self._image(spec, settings)
        tags = self._tags(spec, settings)
        request: dict = {
            'ImageId': image_id, 'MinCount': 1, 'MaxCount': 1,
            'InstanceType': settings['instance-type'],
            'TagSpecifications': [{'ResourceType': 'instance', 'Tags': tags},
                                  {'ResourceType': 'volume', 'Tags': tags}],
        }
        interface: dict = {'DeviceIndex': 0}
        if pool.settings.get('subnet-id'):
            interface['SubnetId'] = pool.settings['subnet-id']
        if pool.settings.get('security-group-id'):
            interface['Groups'] = [pool.settings['security-group-id']]
        if pool.settings.get('public-ipv4') is not None:
            interface['AssociatePublicIpAddress'] = bool(pool.settings['public-ipv4'])
        if pool.settings.get('public-ipv6'):
            interface['Ipv6AddressCount'] = 1
        request['NetworkInterfaces'] = [interface]
        if settings.get('key-name'):
            request['KeyName'] = settings['key-name']
        if settings.get('ebs-optimized'):
            request['EbsOptimized'] = True
        if settings.get('userdata'):
            request['UserData'] = settings['userdata']
        profile = settings.get('iam-instance-profile')
        if profile:
            request['IamInstanceProfile'] = {'Arn': profile['arn']} if 'arn' in profile \
                else {'Name': profile['name']}
        ebs = {k: settings[s] for k, s in (('VolumeSize', 'volume-size'),
                                           ('VolumeType', 'volume-type'), ('Iops', 'iops'),
                                           ('Throughput', 'throughput')) if settings.get(s)}
        if ebs:
            ebs['DeleteOnTermination'] = True
            request['BlockDeviceMappings'] = [{'DeviceName': '/dev/sda1', 'Ebs': ebs}]
        if settings.get('use-spot'):
            request['InstanceMarketOptions'] = {
                'MarketType': 'spot', 'SpotOptions': {
                    'SpotInstanceType': 'one-time',
                    'InstanceInterruptionBehavior': 'terminate'}}
        if settings.get('imdsv2') == 'required':
            request['MetadataOptions'] = {'HttpTokens': 'required', 'HttpEndpoint': 'enabled'}
        if settings.get('dedicated-host'):
            request['Placement'] = {'Tenancy': 'host'}
        if spec.az:
            request.setdefault('Placement', {})['AvailabilityZone'] = spec.az
        return request, image

    def create(self, spec: InstanceSpec) -> str:
        request, image = self.run_request(spec)
        settings = self.provider.pools[spec.pool].labels[spec.label].settings
        try:
            result = self.ec2.run_instances(**request)
        except (ClientError, BotoCoreError) as e:
            error = _error(f'launching {spec.name}', e)
            if isinstance(error, QuotaError):
                self.invalidate_quota()
            raise error from None
        instance_id = result['Instances'][0]['InstanceId']
        ctype = image.get('connection-type') or 'ssh'
        with self._lock:
            self._launches[instance_id] = _Launch(
                spec=spec, username=image.get('username'), connection_type=ctype,
                connection_port=image.get('connection-port') or (5986 if ctype == 'winrm'
                                                                 else 22),
                host_key_checking=settings.get('host-key-checking', True),
                started=time.monotonic())
        log.info('Provider %s: instance %s created for node %s', self.provider.name,
                 instance_id, spec.node_id)
        return instance_id

    def _describe(self, instance_id: str) -> dict | None:
        try:
            found = self.ec2.describe_instances(InstanceIds=[instance_id])
        except ClientError as e:
            if _code(e) == 'InvalidInstanceID.NotFound':
                return None
            raise _error(f'describing {instance_id}', e) from None
        for reservation in found.get('Reservations') or []:
            for inst in reservation.get('Instances') or []:
                return inst
        return None

    def poll(self, external_id: str) -> Instance | None:
        with self._lock:
            launch = self._launches.get(external_id)
        try:
            found = self._describe(external_id)
        except ProviderError as e:
            log.warning('Provider %s: polling %s: %s', self.provider.name, external_id, e)
            return None
        if found is None:
            self._forget(external_id)
            raise LaunchError(f'instance {external_id} vanished')
        state = found['State']['Name']
        now = time.monotonic()
        if state == 'pending':
            if launch is not None and now - launch.started > self.settings['launch-timeout']:
                self._fail(external_id, f'instance {external_id} not running within '
                                        f'launch-timeout {self.settings["launch-timeout"]}s')
            return None
        if state != 'running':
            reason = (found.get('StateReason') or {}).get('Message') or state
            self._fail(external_id, f'instance {external_id} is {state}: {reason}')
        inst = self._instance(found)
        if launch is None:
            inst.ready = True
            return inst
        launch.running_at = launch.running_at or now
        inst.username = launch.username
        inst.connection_type = launch.connection_type
        inst.connection_port = launch.connection_port
        if not self._reachable(launch, inst, now):
            return None
        inst.ready = True
        self._forget(external_id)
        return inst

    def _reachable(self, launch: _Launch, inst: Instance, now: float) -> bool:
        problem = reachability_problem(inst, launch.host_key_checking)
        if problem is None:
            return True
        if now - launch.running_at > self.settings['boot-timeout']:
            self._fail(inst.external_id, f'instance {inst.external_id}: {problem} within '
                                         f'boot-timeout {self.settings["boot-timeout"]}s')
        return False

    def _fail(self, instance_id: str, message: str) -> None:
        self._forget(instance_id)
        raise LaunchError(message)

    def _forget(self, instance_id: str) -> None:
        with self._lock:
            self._launches.pop(instance_id, None)

    def _instance(self, found: dict) -> Instance:
        tags = tags_of(found)
        pool = self.provider.pools.get(tags.get('nodepool_pool_name', ''))
        internal = bool(pool and pool.settings.get('use-internal-ip'))
        private, public = found.get('PrivateIpAddress'), found.get('PublicIpAddress')
        ipv6 = None
        for interface in found.get('NetworkInterfaces') or []:
            for address in interface.get('Ipv6Addresses') or []:
                ipv6 = ipv6 or address.get('Ipv6Address')
        return Instance(
            external_id=found['InstanceId'], node_id=tags.get('nodepool_node_id'),
            interface_ip=private if internal else (public or ipv6 or private),
            public_ipv4=public, private_ipv4=private, public_ipv6=ipv6,
            hostname=found.get('PrivateDnsName') or None, region=self.settings['region-name'],
            az=(found.get('Placement') or {}).get('AvailabilityZone'),
            host_id=(found.get('Placement') or {}).get('HostId'))

    # -- deleting and listing -------------------------------------------------------------

    def delete(self, external_id: str) -> None:
        self._forget(external_id)
        try:
            self.ec2.terminate_instances(InstanceIds=[external_id])
        except ClientError as e:
            if _code(e) == 'InvalidInstanceID.NotFound':
                return
            raise _error(f'terminating {external_id}', e) from None
        except BotoCoreError as e:
            raise _error(f'terminating {external_id}', e) from None
        deadline = time.monotonic() + self.delete_timeout
        delay = 0.05
        while True:
            found = self._describe(external_id)
            if found is None or found['State']['Name'] == 'terminated':
                return
            if time.monotonic() + delay > deadline:
                raise ProviderError(f'instance {external_id} is still '
                                    f'{found["State"]["Name"]} {self.delete_timeout}s after '
                                    'terminating it')
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _ours(self) -> list[dict]:
        return [{'Name': 'tag:nodepool_provider_name', 'Values': [self.provider.name]}]

    def list(self) -> list[Instance]:
        pages = self._call('listing instances', self.ec2.describe_instances,
                           Filters=self._ours() + [{'Name': 'instance-state-name',
                                                    'Values': list(ALIVE_STATES)}])
        out = []
        for reservation in pages.get('Reservations') or []:
            for found in reservation.get('Instances') or []:
                tags = tags_of(found)
                out.append(Instance(external_id=found['InstanceId'],
                                    node_id=tags.get('nodepool_node_id'),
                                    hostname=tags.get('Name')))
        return out

    def cleanup_leaks(self) -> None:
        """Volumes of ours that nothing uses (an instance died before its
        volume could go with it)."""
        found = self._call('listing volumes', self.ec2.describe_volumes,
                           Filters=self._ours() + [{'Name': 'status', 'Values': ['available']}])
        for volume in found.get('Volumes') or []:
            log.warning('Provider %s: deleting leaked volume %s (node %s)', self.provider.name,
                        volume['VolumeId'], tags_of(volume).get('nodepool_node_id'))
            self._call(f'deleting volume {volume["VolumeId"]}', self.ec2.delete_volume,
                       VolumeId=volume['VolumeId'])

    # -- quota -------------------------------------------------------------------------

    def _fetch_quota(self) -> Quota:
        """The account's on-demand vCPU quota less the vCPUs of instances
        that are not ours (ours are counted from node records)."""
        self.ec2
        answer = self._call('reading the vCPU quota', self._quotas.get_service_quota,
                            ServiceCode=VCPU_QUOTA[0], QuotaCode=VCPU_QUOTA[1])
        vcpus = float(answer['Quota']['Value'])
        found = self._call('listing instances', self.ec2.describe_instances,
                           Filters=[{'Name': 'instance-state-name',
                                     'Values': ['pending', 'running']}])
        used = 0
        for reservation in found.get('Reservations') or []:
            for inst in reservation.get('Instances') or []:
                if tags_of(inst).get('nodepool_provider_name') == self.provider.name:
                    continue
                used += self.instance_type(inst['InstanceType'])[0]
        cores = vcpus - used
        if self.settings.get('max-cores') is not None:
            cores = min(cores, self.settings['max-cores'])
        return Quota(cores=cores, ram=self.settings.get('max-ram'))
