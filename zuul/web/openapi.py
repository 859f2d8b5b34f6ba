"""The OpenAPI document of /api (openapi.yaml) and a small validator.

The validator understands the subset of OpenAPI 3 schema the document
uses: $ref to components, type (with nullable), properties, required,
additionalProperties, items, enum, oneOf/anyOf/allOf. Tests check every API
response against the document with it, so the two cannot drift.
"""

from __future__ import annotations

import functools
import os
import re

import yaml

SPEC_PATH = os.path.join(os.path.dirname(__file__), 'openapi.yaml')

_SLASHED = ('project', 'branch')
_TYPES = {
    'string': str, 'integer': int, 'number': (int, float), 'boolean': bool,
    'array': list, 'object': dict,
}


@functools.cache
def spec_text() -> str:
    with open(SPEC_PATH, encoding='utf-8') as f:
        return f.read()


@functools.cache
def load_spec() -> dict:
    return yaml.safe_load(spec_text())


def _path_regex(template: str) -> re.Pattern:
    # {project} and {branch} may contain slashes (org/project,
    # stable/2.0); other parameters not. The shortest project wins, as
    # zuul-web reads .../project/<p>/branch/<b>/freeze-jobs.
    def param(match):
        name = match.group(1)
        return f'(?P<{name}>.+?)' if name in _SLASHED else f'(?P<{name}>[^/]+)'
    return re.compile('^' + re.sub(r'\{(\w+)\}', param, re.escape(template).replace(
        r'\{', '{').replace(r'\}', '}')) + '$')


def find_operation(spec: dict, method: str, path: str) -> tuple[str, dict]:
    """The (template, operation) documenting ``method path`` (path without
    the query string, starting with /api/)."""
    for template, item in spec['paths'].items():
        if _path_regex(template).match(path) and method.lower() in item:
            return template, item[method.lower()]
    raise LookupError(f'{method} {path} is not documented in openapi.yaml')


def response_schema(spec: dict, method: str, path: str, status: int,
                    content_type: str = 'application/json') -> dict:
    template, operation = find_operation(spec, method, path)
    responses = operation.get('responses', {})
    response = responses.get(str(status)) or responses.get('default')
    if response is None:
        raise LookupError(f'{method} {template}: status {status} is not documented')
    if '$ref' in response:
        response = spec['components']['responses'][response['$ref'].rsplit('/', 1)[-1]]
    content = response.get('content', {})
    if content_type not in content:
        raise LookupError(f'{method} {template} {status}: {content_type} is not documented')
    return content[content_type].get('schema', {})


def validate(spec: dict, schema: dict, value, where: str = '$') -> list[str]:
    """Every way ``value`` breaks ``schema`` (empty when it conforms)."""
    if '$ref' in schema:
        name = schema['$ref'].rsplit('/', 1)[-1]
        return validate(spec, spec['components']['schemas'][name], value, where)
    if 'allOf' in schema:
        return [e for s in schema['allOf'] for e in validate(spec, s, value, where)]
    if value is None:
        return [] if schema.get('nullable') or not schema else [f'{where}: null not allowed']
    for key in ('oneOf', 'anyOf'):
        if key in schema:
            results = [validate(spec, s, value, where) for s in schema[key]]
            if not any(not r for r in results):
                return [f'{where}: matches none of {key}: ' + '; '.join(r[0] for r in results)]
            return []
    errors = _check_type(schema, value, where)
    if errors:
        return errors
    if 'enum' in schema and value not in schema['enum']:
        return [f'{where}: {value!r} not one of {schema["enum"]}']
    if isinstance(value, str) and len(value) < schema.get('minLength', 0):
        return [f'{where}: shorter than {schema["minLength"]}']
    if isinstance(value, list) and 'items' in schema:
        for i, element in enumerate(value):
            errors += validate(spec, schema['items'], element, f'{where}[{i}]')
    if isinstance(value, dict):
        errors += _check_object(spec, schema, value, where)
    return errors


def _check_type(schema, value, where) -> list[str]:
    kind = schema.get('type')
    if kind is None:
        return []
    expected = _TYPES[kind]
    if isinstance(value, bool) and kind in ('integer', 'number'):
        return [f'{where}: expected {kind}, got boolean']
    if not isinstance(value, expected):
        return [f'{where}: expected {kind}, got {type(value).__name__}']
    return []


def _check_object(spec, schema, value, where) -> list[str]:
    errors = []
    props = schema.get('properties', {})
    for name in schema.get('required', []):
        if name not in value:
            errors.append(f'{where}: missing required property {name!r}')
    extra = schema.get('additionalProperties', True)
    for name, element in value.items():
        if name in props:
            errors += validate(spec, props[name], element, f'{where}.{name}')
        elif extra is False:
            errors.append(f'{where}: unexpected property {name!r}')
        elif isinstance(extra, dict):
            errors += validate(spec, extra, element, f'{where}.{name}')
    return errors
