"""Who may read a tenant, and who may act on it, in zuul-web.

The bearer token (``Authorization: Bearer <JWT>``) is checked by
zuul.conf's authenticators (zuul/lib/auth.py); the tenant file's rules
(``admin-rules``, ``access-rules``, ``api-root``) come from the scheduler
(RPC ``zuul:auth_rules``) and are matched here (zuul/lib/authz.py):

- a tenant without ``access-rules`` may be read by anyone; with them,
  only by a token that matches one of them or one of its ``admin-rules``
  (or names it in an allowed ``zuul.admin`` claim); no token, or a token
  that is not accepted, is 401 with ``WWW-Authenticate``; an accepted
  token that matches nothing is 403. The tenant list leaves out the
  tenants the caller may not read.
- acting on a tenant (enqueue, dequeue, promote, autohold) needs a token
  that matches one of its ``admin-rules``, or whose ``zuul.admin`` claim
  lists the tenant when its authenticator has
  ``allow_authz_override=true`` (from another issuer that claim is 401).
- ``api-root``'s ``access-rules`` guard the tenant list the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from zuul.lib import authz
from zuul.lib.auth import AuthenticationError, Authenticators

log = logging.getLogger('zuul.web.access')


class AccessDeniedError(Exception):
    """401 (``www_authenticate`` set) or 403; the handler turns it into
    the JSON error answer."""

    def __init__(self, status: int, message: str, www_authenticate: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.www_authenticate = www_authenticate


@dataclass
class Caller:
    """An authenticated requester."""

    claims: dict
    uid: str
    issuer: str
    override: list = field(default_factory=list)   # tenants of an allowed zuul.admin


def _quote(text: str) -> str:
    return str(text).replace('\\', '\\\\').replace('"', '\\"')


class AccessPolicy:
    """``fetch_rules()`` answers the RPC ``zuul:auth_rules`` (called once
    per request, so a reconfiguration acts at once)."""

    def __init__(self, authenticators: Authenticators, fetch_rules):
        self.authenticators = authenticators
        self.fetch_rules = fetch_rules

    # -- authentication -----------------------------------------------------------

    def realm(self, rules: dict | None, tenant: str | None) -> str:
        info = (rules or {}).get('tenants', {}).get(tenant) if tenant else \
            (rules or {}).get('api_root')
        return (info or {}).get('authentication_realm') or self.authenticators.default_realm()

    def authenticate(self, header: str | None, realm: str) -> Caller:
        """The caller of an Authorization header; AccessDeniedError(401) when
        it is missing or not accepted."""
        try:
            claims, authenticator = self.authenticators.authenticate(header)
        except AuthenticationError as e:
            challenge = f'Bearer realm="{_quote(realm)}"'
            if header:
                challenge += f', error="invalid_token", error_description="{_quote(e)}"'
            raise AccessDeniedError(401, str(e), challenge) from None
        caller = Caller(claims, authenticator.uid(claims), claims.get('iss', ''))
        self._override(caller, authenticator, realm)
        return caller

    @staticmethod
    def _override(caller: Caller, authenticator, realm: str) -> None:
        zuul_claim = caller.claims.get('zuul')
        if not isinstance(zuul_claim, dict) or 'admin' not in zuul_claim:
            return
        challenge = f'Bearer realm="{_quote(realm)}", error="invalid_token"'
        if not authenticator.config.allow_authz_override:
            log.info('Issuer %s attempt to override user %s admin rules denied',
                     caller.issuer, caller.uid)
            raise AccessDeniedError(401, 'Issuer is not allowed to set "zuul.admin" claim',
                               challenge)
        tenants = zuul_claim['admin']
        if not isinstance(tenants, list) or not all(isinstance(t, str) for t in tenants):
            raise AccessDeniedError(401, 'The "zuul.admin" claim is expected to be a list of '
                               'tenants', challenge)
        log.info('Issuer %s attempt to override user %s admin rules granted',
                 caller.issuer, caller.uid)
        caller.override = list(tenants)

    # -- authorization --------------------------------------------------------------

    @staticmethod
    def is_admin(rules: dict, tenant: str, caller: Caller) -> bool:
        info = rules.get('tenants', {}).get(tenant) or {}
        return tenant in caller.override or authz.any_rule_matches(
            info.get('admin_rules'), rules.get('rules', {}), caller.claims, caller.uid, tenant)

    def may_read(self, rules: dict, tenant: str, caller: Caller | None) -> bool:
        info = rules.get('tenants', {}).get(tenant) or {}
        if not info.get('access_rules'):
            return True
        if caller is None:
            return False
        return self.is_admin(rules, tenant, caller) or authz.any_rule_matches(
            info['access_rules'], rules.get('rules', {}), caller.claims, caller.uid, tenant)

    def check_read(self, tenant: str, header: str | None) -> None:
        """Raise AccessDeniedError unless the caller may read ``tenant``."""
        rules = self.fetch_rules()
        info = rules.get('tenants', {}).get(tenant) or {}
        if not info.get('access_rules'):
            return
        caller = self.authenticate(header, self.realm(rules, tenant))
        if not self.may_read(rules, tenant, caller):
            raise AccessDeniedError(403, f'User {caller.uid} is not allowed to access tenant '
                               f'{tenant}')

    def check_admin(self, tenant: str, header: str | None) -> Caller:
        """The caller, if it may act on ``tenant``; else AccessDeniedError."""
        rules = self.fetch_rules()
        caller = self.authenticate(header, self.realm(rules, tenant))
        if not self.is_admin(rules, tenant, caller):
            raise AccessDeniedError(403, f'User {caller.uid} is not allowed to perform this '
                               f'action on tenant {tenant}')
        return caller

    def authorizations(self, tenant: str, header: str | None) -> dict:
        """GET /api/tenant/<t>/authorizations: what the caller may do."""
        rules = self.fetch_rules()
        caller = self.authenticate(header, self.realm(rules, tenant))
        if not self.may_read(rules, tenant, caller):
            raise AccessDeniedError(403, f'User {caller.uid} is not allowed to access tenant '
                               f'{tenant}')
        return {'zuul': {'admin': self.is_admin(rules, tenant, caller), 'scope': [tenant]}}

    def visible_tenants(self, tenants: list[dict], header: str | None) -> list[dict]:
        """The tenant list as this caller may see it (api-root's
        access-rules first; a token that is not accepted counts as none
        for the tenants' own rules)."""
        rules = self.fetch_rules()
        root = rules.get('api_root') or {}
        caller = None
        if root.get('access_rules'):
            caller = self.authenticate(header, self.realm(rules, None))
            if not authz.any_rule_matches(root['access_rules'], rules.get('rules', {}),
                                          caller.claims, caller.uid, None):
                raise AccessDeniedError(403, f'User {caller.uid} is not allowed to list tenants')
        elif header:
            try:
                caller = self.authenticate(header, self.realm(rules, None))
            except AccessDeniedError:
                caller = None
        return [t for t in tenants if self.may_read(rules, t['name'], caller)]
