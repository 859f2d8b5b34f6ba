"""``- secret:`` stanzas: a name and data whose values may be
``!encrypted/pkcs1-oaep`` (left encrypted until a job runs)."""

from __future__ import annotations

import voluptuous as vs

from zuul.configloader.schema import line_of, validate
from zuul.lib import yamlutil
from zuul.model.errors import ConfigurationError, SourceContext
from zuul.model.secret import Secret


def _data_value(value):
    """Secret data: plain values, encrypted values, and mappings/lists of
    them, to any depth."""
    if isinstance(value, (str, int, float, bool, yamlutil.EncryptedPKCS1OAEP)) or \
            value is None:
        return value
    if isinstance(value, dict):
        for k, v in value.items():
            _data_value(v)
        return value
    if isinstance(value, list):
        for v in value:
            _data_value(v)
        return value
    raise vs.Invalid(f'unsupported value of type {type(value).__name__}')


SECRET_SCHEMA = vs.Schema({
    vs.Required('name'): str,
    vs.Required('data'): vs.All(dict, _data_value),
})


class SecretParser:
    def __init__(self, context=None):
        self.context = context

    def parse(self, conf, source_context: SourceContext) -> Secret:
        validate(SECRET_SCHEMA, dict(conf))
        if conf['name'] in ('zuul', 'nodepool'):
            raise ConfigurationError(f'the secret name "{conf["name"]}" is reserved')
        return Secret(name=conf['name'], source_context=source_context,
                      start_line=line_of(conf), data=conf['data'])
