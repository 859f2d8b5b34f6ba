"""A small Azure Resource Manager client on ``requests``: a service
principal's token (client credentials, from an ``auth-path`` file in the
form ``az ad sp create-for-rbac --sdk-auth`` writes), resources by id,
and the ``Azure-AsyncOperation``/``Location`` headers of long-running
operations.  (The official SDK is a dozen packages for these few calls;
released Nodepool talks to ARM with a client of its own too.)"""

from __future__ import annotations

import json
import threading
import time

import requests

from nodepool.driver import LaunchError, ProviderError, QuotaError

QUOTA_CODES = ('QuotaExceeded', 'OperationNotAllowed', 'SkuNotAvailable', 'AllocationFailed',
               'ZonalAllocationFailed', 'OverconstrainedAllocationRequest')
API = {'Microsoft.Compute': '2023-03-01', 'Microsoft.Network': '2023-04-01',
       'resourceGroups': '2021-04-01'}


class ArmError(ProviderError):
    pass


def arm_error(what: str, response) -> ProviderError:
    try:
        error = response.json().get('error') or {}
    except ValueError:
        error = {}
    code, message = error.get('code', response.status_code), error.get('message', '')
    text = f'{what}: {code}: {message}'
    if code in QUOTA_CODES:
        return QuotaError(text)
    if 400 <= response.status_code < 500 and response.status_code != 429:
        return LaunchError(text)
    return ProviderError(text)


class ArmClient:
    def __init__(self, auth_path: str):
        try:
            with open(auth_path) as f:
                self.auth = json.load(f)
        except (OSError, ValueError) as e:
            raise ProviderError(f'azure auth-path {auth_path}: {e}') from None
        for key in ('clientId', 'clientSecret', 'subscriptionId', 'tenantId'):
            if not self.auth.get(key):
                raise ProviderError(f'azure auth-path {auth_path}: no {key}')
        self.base = (self.auth.get('resourceManagerEndpointUrl') or
                     'https://management.azure.com/').rstrip('/')
        self.login = (self.auth.get('activeDirectoryEndpointUrl') or
                      'https://login.microsoftonline.com').rstrip('/')
        self.session = requests.Session()
        self._lock = threading.Lock()
        self._token: tuple[str, float] | None = None

    @property
    def subscription(self) -> str:
        return f'/subscriptions/{self.auth["subscriptionId"]}'

    def _bearer(self) -> str:
        with self._lock:
            if self._token is None or time.time() > self._token[1] - 60:
                r = self.session.post(
                    f'{self.login}/{self.auth["tenantId"]}/oauth2/token', timeout=30, data={
                        'grant_type': 'client_credentials', 'client_id': self.auth['clientId'],
                        'client_secret': self.auth['clientSecret'],
                        'resource': self.base + '/'})
                if r.status_code != 200:
                    raise ProviderError(f'azure login failed: {r.status_code} {r.text[:200]}')
                body = r.json()
                self._token = (body['access_token'], time.time() + int(body['expires_in']))
            return self._token[0]

    def request(self, method: str, path: str, what: str, body: dict | None = None,
                api: str | None = None, ok404: bool = False):
        """JSON of the answer (None for 404 with ``ok404``, or no body)."""
        version = api or next((v for k, v in API.items() if k in path), API['resourceGroups'])
        url = f'{self.base}{path}'
        try:
            r = self.session.request(method, url, params={'api-version': version},
                                     json=body, timeout=60,
                                     headers={'Authorization': f'Bearer {self._bearer()}'})
        except requests.RequestException as e:
            raise ProviderError(f'{what}: {e}') from None
        if r.status_code == 404 and ok404:
            return None
        if r.status_code >= 400:
            raise arm_error(what, r)
        return r.json() if r.content else None
