"""The provider configuration zuul-launcher serves, as the scheduler
publishes it.

Providers are non-speculative configuration (seed 001: like pipelines,
changes take effect when they merge), so the scheduler resolves them
from each tenant's layout after every (re)configuration and writes one
znode per provider::

    /zuul/launcher/providers/<quoted canonical provider name>
        JSON: zuul.model.launcher.ResolvedProvider.to_dict()

A provider defined in several tenants is one provider (its ``tenants``
lists them all).  Providers that no tenant defines any more are removed.
Every zuul-launcher reads (and watches) this tree; nothing else of the
tenant layouts is needed to launch nodes.
"""

from __future__ import annotations

import json
import logging

from kazoo.exceptions import NoNodeError, NotEmptyError

from zuul.model.launcher import ResolvedProvider, quote_name

log = logging.getLogger('zuul.zk.launcher_config')

PROVIDER_ROOT = '/zuul/launcher/providers'


def provider_path(canonical_name: str) -> str:
    return f'{PROVIDER_ROOT}/{quote_name(canonical_name)}'


def merge_tenants(per_tenant: dict[str, dict[str, ResolvedProvider]]
                  ) -> dict[str, ResolvedProvider]:
    """{tenant: {canonical: provider}} -> {canonical: provider} with the
    tenants of each provider listed (the first tenant's resolution wins;
    a provider is defined by one project, so all agree)."""
    out: dict[str, ResolvedProvider] = {}
    for tenant in sorted(per_tenant):
        for canonical, provider in per_tenant[tenant].items():
            mine = out.setdefault(canonical, provider)
            if tenant not in mine.tenants:
                mine.tenants = sorted(set(mine.tenants) | {tenant})
    return out


def publish(client, providers: dict[str, ResolvedProvider]) -> None:
    """Make the tree hold exactly ``providers`` (writes only what
    changed)."""
    client.ensure_path(PROVIDER_ROOT)
    wanted = {quote_name(c): p for c, p in providers.items()}
    for child in client.get_children(PROVIDER_ROOT):
        if child not in wanted:
            try:
                client.delete(f'{PROVIDER_ROOT}/{child}', recursive=True)
                log.info('Provider %s is no longer configured', child)
            except (NoNodeError, NotEmptyError):
                pass
    for quoted, provider in wanted.items():
        data = json.dumps(provider.to_dict(), sort_keys=True).encode('utf8')
        path = f'{PROVIDER_ROOT}/{quoted}'
        try:
            old, _ = client.get(path)
        except NoNodeError:
            client.create(path, data, makepath=True)
            log.info('Provider %s published', provider.canonical_name)
            continue
        if old != data:
            client.set(path, data)
            log.info('Provider %s updated', provider.canonical_name)


def read_all(client, watch=None) -> dict[str, ResolvedProvider]:
    """Every published provider; one that cannot be read is logged and
    left out (a newer scheduler's schema, a torn write).  ``watch`` is
    set on the tree and on every provider read (a launcher re-reads when
    it fires)."""
    out: dict[str, ResolvedProvider] = {}
    try:
        children = client.get_children(PROVIDER_ROOT, watch=watch)
    except NoNodeError:
        return out
    for child in children:
        try:
            raw, _ = client.get(f'{PROVIDER_ROOT}/{child}', watch=watch)
            provider = ResolvedProvider.from_dict(json.loads(raw.decode('utf8')))
        except NoNodeError:
            continue
        except (ValueError, TypeError, KeyError) as e:
            log.error('Unreadable provider record %s: %s', child, e)
            continue
        out[provider.canonical_name] = provider
    return out
