"""Authorization rules of the tenant file (``authorization-rule``, and its
older spelling ``admin-rule``): does a token's claims match one?

A rule is a list of conditions; it matches when at least one condition
does. A condition is a mapping of claim -> value; it matches when every
entry does:

- the claim is named plainly (``iss``), by a dotted path into nested
  claims (``resources_access.account.roles``), or as a nested mapping
  (``resources_access: {account: {roles: ...}}``): the same thing;
- ``zuul_uid`` is the value of the authenticator's ``uid_claim``;
- a string value equals a string claim, or is one of a list claim;
- a list value: a list claim holds every one of them, a string claim is
  one of them;
- ``{tenant.name}`` in a value is replaced by the name of the tenant the
  rule is checked for.

A claim the token does not have never matches.
"""

from __future__ import annotations

_MISSING = object()
SCALARS = (str, int, float, bool)


class RuleError(ValueError):
    """A condition of an unusable shape (the message says which)."""


def check_conditions(conditions) -> list[dict]:
    """The conditions of a rule as a list of mappings; RuleError when
    they are not (a single mapping is one condition)."""
    if isinstance(conditions, dict):
        conditions = [conditions]
    if not isinstance(conditions, list) or not conditions:
        raise RuleError('conditions must be a non-empty list of mappings of claim to value')
    for condition in conditions:
        if not isinstance(condition, dict) or not condition:
            raise RuleError('each condition must be a mapping of claim to value')
        _check_values(condition)
    return list(conditions)


def _check_values(mapping: dict) -> None:
    for key, value in mapping.items():
        if not isinstance(key, str) or not key:
            raise RuleError(f'claim names must be strings, not {key!r}')
        if isinstance(value, dict):
            _check_values(value)
        elif isinstance(value, list):
            if not value or not all(isinstance(v, SCALARS) for v in value):
                raise RuleError(f'claim "{key}": a list value must hold strings')
        elif not isinstance(value, SCALARS):
            raise RuleError(f'claim "{key}": a value must be a string, a list or a mapping')


def _claim(claims, name: str):
    if isinstance(claims, dict) and name in claims:
        return claims[name]
    value = claims
    for part in name.split('.'):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _template(value, tenant: str | None):
    if isinstance(value, str) and tenant is not None:
        return value.replace('{tenant.name}', tenant)
    return value


def _same(expected, claim) -> bool:
    if isinstance(claim, SCALARS) and isinstance(expected, SCALARS):
        if isinstance(claim, bool) or isinstance(expected, bool):
            return claim is expected or str(claim).lower() == str(expected).lower()
        return str(claim) == str(expected)
    return False


def _value_matches(expected, claim, tenant) -> bool:
    if claim is _MISSING:
        return False
    if isinstance(expected, dict):
        return isinstance(claim, dict) and all(
            _value_matches(v, _claim(claim, k), tenant) for k, v in expected.items())
    if isinstance(expected, list):
        wanted = [_template(v, tenant) for v in expected]
        if isinstance(claim, list):
            return all(any(_same(w, c) for c in claim) for w in wanted)
        return any(_same(w, claim) for w in wanted)
    expected = _template(expected, tenant)
    if isinstance(claim, list):
        return any(_same(expected, c) for c in claim)
    return _same(expected, claim)


def condition_matches(condition: dict, claims: dict, uid: str | None,
                      tenant: str | None) -> bool:
    for name, expected in condition.items():
        claim = uid if name == 'zuul_uid' else _claim(claims, name)
        if claim is None:
            claim = _MISSING
        if not _value_matches(expected, claim, tenant):
            return False
    return True


def rule_matches(conditions, claims: dict, uid: str | None, tenant: str | None) -> bool:
    """Does one rule's list of conditions match (at least one does)?"""
    if isinstance(conditions, dict):
        conditions = [conditions]
    return any(isinstance(c, dict) and condition_matches(c, claims, uid, tenant)
               for c in conditions or ())


def any_rule_matches(names, rules: dict, claims: dict, uid: str | None,
                     tenant: str | None) -> bool:
    """Does one of the rules ``names`` (looked up in ``rules``: name ->
    conditions) match? An unknown name matches nothing."""
    return any(name in rules and rule_matches(rules[name], claims, uid, tenant)
               for name in names or ())
