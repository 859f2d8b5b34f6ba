"""Keys released Zuul documents that this system accepts without acting
on them, each with its reason (doc/source/compatibility.rst lists the
same). Loading a configuration that uses one gives a warning naming the
key and the reason: ``zuul-admin tenant-conf-check`` and the config-check
command print it, and the scheduler logs it."""

from __future__ import annotations

# Job stanza keys.
JOB_KEYS = {
    'attempts-limit': 'not a key of released Zuul (it has "attempts"); it has no effect',
}

# Pipeline reporter actions.
PIPELINE_ACTIONS = {
    'message': 'released Zuul does not document when a "message" report is sent; '
               'these reporters are never called',
}

# Tenant-file tenant keys, per-project keys and top-level objects.
TENANT_KEYS = {
    'image-build-credentials': 'image builds here need no credentials from the tenant; '
                               'it has no effect',
}
PROJECT_KEYS = {
    'allow-base-jobs': 'released Zuul does not document it; it has no effect',
}
# Top-level objects of the tenant file accepted without effect (none
# now: authorization rules and api-root act in zuul-web).
TENANT_OBJECTS: dict[str, str] = {}


def job_warnings(conf) -> list[str]:
    if not isinstance(conf, dict):
        return []
    return [f'job key "{key}": {why}' for key, why in JOB_KEYS.items() if key in conf]


def pipeline_warnings(conf) -> list[str]:
    if not isinstance(conf, dict):
        return []
    return [f'reporter action "{action}": {why}' for action, why in PIPELINE_ACTIONS.items()
            if conf.get(action)]


def tenant_warnings(body) -> list[str]:
    """Warnings for one ``tenant`` object of the tenant file."""
    if not isinstance(body, dict):
        return []
    out = [f'tenant key "{key}": {why}' for key, why in TENANT_KEYS.items() if key in body]
    found = set()
    _project_keys(body.get('source'), found)
    out += [f'project key "{key}": {PROJECT_KEYS[key]}' for key in sorted(found)]
    return out


def _project_keys(value, found: set) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in PROJECT_KEYS:
                found.add(key)
            _project_keys(inner, found)
    elif isinstance(value, list):
        for inner in value:
            _project_keys(inner, found)


# zuul.conf keys (section, key).
ZUUL_CONF_KEYS = {
    ('scheduler', 'jobdir'): 'not a key of released Zuul (the executor\'s build directory '
                             'is [executor] job_dir); it has no effect',
}


def zuul_conf_warnings(path: str) -> list[str]:
    """Warnings for the keys of ``ZUUL_CONF_KEYS`` that zuul.conf sets."""
    import configparser
    config = configparser.ConfigParser(interpolation=None)
    config.read(path)
    return [f'{path}: [{section}] {key}: {why}'
            for (section, key), why in ZUUL_CONF_KEYS.items()
            if config.has_option(section, key)]
