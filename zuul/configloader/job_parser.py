"""Parsing ``- job:`` stanzas and project-pipeline job entries into Job
variants (zuul/model/job.py). Validation is voluptuous; regexes (branches,
files, irrelevant-files) come from untrusted config and are compiled with
RE2.
"""

from __future__ import annotations

import re2
import voluptuous as vs

from zuul.lib import ansiblevars, yamlutil
from zuul.lib.regex import RegexError, compile_regex
from zuul.model.errors import ConfigurationError, SourceContext
from zuul.model.job import (
    FLAG_ATTRIBUTES,
    Job,
    JobDependency,
    PlaybookRef,
    RequiredProject,
    RoleRef,
    SecretUse,
)

# Names Zuul gives variables of its own.
RESERVED_VARIABLE_ROOTS = {'zuul', 'nodepool', 'unsafe_vars', 'zuul_return'}


def _scalar_or_list(t):
    return vs.Any(t, [t])


def _str_or_wrapped(t):
    return vs.Any(t, yamlutil.Inherit, yamlutil.Override)


def _relative_path(value):
    """A playbook path inside its project: relative, no ``..``."""
    if not isinstance(value, str) or not value:
        raise vs.Invalid('expected a playbook path')
    if value.startswith('/') or '..' in value.split('/') or '\0' in value:
        raise vs.Invalid(f'playbook path {value!r} must be relative to its project and may '
                         'not contain ".."')
    return value


# A role name becomes a file name on the executor: one plain path component.
_role_name = vs.All(str, vs.Match(r'^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$',
                                  msg='a role name is one path component of letters, '
                                      'digits, "_", "-" and "." (no "/" or "..")'))
_playbook = vs.Any(_relative_path, {vs.Required('name'): _relative_path, 'semaphore': str,
                                    'semaphores': _scalar_or_list(str), 'cleanup': bool})
_role = vs.Any({vs.Required('zuul'): str, 'name': _role_name},
               {vs.Required('galaxy'): str, 'name': _role_name})
_secret_use = vs.Any(str, {vs.Required('name'): str, vs.Required('secret'): str,
                           'pass-to-parent': bool})
_required_project = vs.Any(str, {vs.Required('name'): str, 'override-checkout': str,
                                 'override-branch': str})
_dependency = vs.Any(str, {vs.Required('name'): str, 'soft': bool})
_nodeset_inline = vs.Any(str, dict, [vs.Any(str, dict)])
_vars = vs.Any(dict, yamlutil.Override, yamlutil.Inherit)
_regex = vs.Any(str, {vs.Required('regex'): str, 'negate': bool})

JOB_ATTRIBUTES = {
    'parent': vs.Any(str, None),
    'description': str,
    'abstract': bool, 'final': bool, 'protected': bool, 'intermediate': bool,
    'success-message': str, 'failure-message': str,
    'success-url': str, 'failure-url': str,
    'hold-following-changes': bool,
    'voting': bool,
    'semaphore': str, 'semaphores': _scalar_or_list(str),
    'tags': _str_or_wrapped(_scalar_or_list(str)),
    'provides': _str_or_wrapped(_scalar_or_list(str)),
    'requires': _str_or_wrapped(_scalar_or_list(str)),
    'secrets': _scalar_or_list(_secret_use),
    'nodeset': _nodeset_inline,
    'timeout': int, 'post-timeout': int,
    'attempts': int,
    'pre-run': _scalar_or_list(_playbook),
    'run': _scalar_or_list(_playbook),
    'post-run': _scalar_or_list(_playbook),
    'cleanup-run': _scalar_or_list(_playbook),
    'ansible-version': vs.Any(str, int, float),
    'ansible-split-streams': bool,
    'roles': [_role],
    'required-projects': _str_or_wrapped(_scalar_or_list(_required_project)),
    'vars': _vars, 'extra-vars': _vars, 'host-vars': _vars, 'group-vars': _vars,
    'include-vars': list,
    'dependencies': _scalar_or_list(_dependency),
    'allowed-projects': _scalar_or_list(str),
    'allowed-branches': _scalar_or_list(_regex),
    'post-review': bool,
    'branches': _scalar_or_list(_regex),
    'files': _str_or_wrapped(_scalar_or_list(_regex)),
    'irrelevant-files': _str_or_wrapped(_scalar_or_list(_regex)),
    'match-on-config-updates': bool,
    'override-checkout': str, 'override-branch': str,
    'workspace-scheme': vs.Any('golang', 'flat', 'unique'),
    'deduplicate': vs.Any(bool, 'auto'),
    'image-build-name': str,
    'failure-output': _scalar_or_list(str),
    'attempts-limit': int,
    'reuse-results': bool,   # issue 21: zuul/scheduler/reuse.py
    # seed 000 (spec-era) spellings, accepted where unambiguous
    'nodes': _nodeset_inline,
    'auth': {'secrets': _scalar_or_list(_secret_use), 'inherit': bool},
    'repos': _scalar_or_list(_required_project),
    'workspace': str,
    'host': str, 'fingerprint': str,
}

JOB_SCHEMA = vs.Schema({vs.Required('name'): str, **JOB_ATTRIBUTES})
PROJECT_PIPELINE_JOB_SCHEMA = vs.Schema({k: v for k, v in JOB_ATTRIBUTES.items()
                                         if k not in ('abstract', 'intermediate')})

_SIMPLE = {
    'description': 'description', 'success-message': 'success_message',
    'failure-message': 'failure_message', 'hold-following-changes': 'hold_following_changes',
    'success-url': 'success_url', 'failure-url': 'failure_url',
    'voting': 'voting', 'timeout': 'timeout', 'post-timeout': 'post_timeout',
    'attempts': 'attempts', 'ansible-split-streams': 'ansible_split_streams',
    'post-review': 'post_review', 'match-on-config-updates': 'match_on_config_updates',
    'workspace-scheme': 'workspace_scheme', 'deduplicate': 'deduplicate',
    'image-build-name': 'image_build_name', 'workspace': 'workspace',
    'reuse-results': 'reuse_results',
}


def compile_regexes(values, what: str, trusted: bool = False, warnings=None) -> tuple:
    """Compile patterns (strings or ``{regex, negate}``) with RE2 (see
    zuul/lib/regex.py); a fallback's warning is appended to ``warnings``."""
    out = []
    for value in values:
        try:
            regex, warning = compile_regex(value, trusted=trusted)
        except RegexError as e:
            raise ConfigurationError(f'{what}: {e}') from None
        if warning and warnings is not None:
            warnings.append(f'{what}: {warning}')
        out.append(regex)
    return tuple(out)


def pattern_text(value) -> str:
    if isinstance(value, dict):
        prefix = 'not ' if value.get('negate') else ''
        return prefix + str(value.get('regex'))
    return value


def _listify(value) -> list:
    value = yamlutil.unwrap(value)
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def check_variables(variables, what: str, trusted: bool = False) -> None:
    """Refuse variables that would change how Ansible connects to nodes
    (from any project) or how it executes (from an untrusted project):
    zuul.lib.ansiblevars."""
    for key in (variables or {}):
        if ansiblevars.is_connection_variable(key):
            raise ConfigurationError(f'{what}: the variable "{key}" is not allowed '
                                     '(it would change how Zuul connects to nodes)')
        if not trusted and ansiblevars.is_execution_variable(key):
            raise ConfigurationError(f'{what}: the variable "{key}" is not allowed in an '
                                     'untrusted project (it would change how Ansible '
                                     'executes)')
        if key in RESERVED_VARIABLE_ROOTS:
            raise ConfigurationError(f'{what}: the variable name "{key}" is reserved')


def untrusted_text(value, sc: SourceContext):
    """Variables from an untrusted project reach Ansible as unsafe text:
    a template in them is never rendered, in its own playbooks or in a
    trusted one (zuul.lib.yamlutil.mark_unsafe)."""
    return value if sc.trusted else yamlutil.mark_unsafe(value)


class JobParser:
    """Builds Job variants. ``context`` gives tenant limits (attributes
    ``max_job_timeout``, ``max_nodes_per_job``; both may be None)."""

    def __init__(self, context=None):
        self.context = context

    # -- entry points -----------------------------------------------------------

    def parse_job(self, conf, source_context: SourceContext) -> Job:
        try:
            JOB_SCHEMA(dict(conf))
        except vs.Invalid as e:
            raise ConfigurationError(_voluptuous_reason(e)) from None
        return self._build(conf['name'], conf, source_context, project_pipeline=False)

    def parse_project_pipeline_job(self, entry, source_context: SourceContext) -> Job:
        if isinstance(entry, str):
            name, conf = entry, {}
        elif isinstance(entry, dict) and len(entry) == 1:
            name, conf = next(iter(entry.items()))
            conf = conf or {}
            if not isinstance(conf, dict):
                raise ConfigurationError(f'job "{name}" in a project pipeline must be a '
                                         'name or a mapping of attributes')
        else:
            raise ConfigurationError('a project pipeline job must be a job name or a '
                                     'single-key mapping {name: {attributes}}')
        try:
            PROJECT_PIPELINE_JOB_SCHEMA(dict(conf))
        except vs.Invalid as e:
            raise ConfigurationError(f'job "{name}": {_voluptuous_reason(e)}') from None
        line = getattr(entry, 'start_line', None) or getattr(conf, 'start_line', None)
        job = self._build(name, conf, source_context, project_pipeline=True, line=line)
        return job

    # -- building ---------------------------------------------------------------

    def _build(self, name, conf, sc: SourceContext, project_pipeline: bool,
               line=None) -> Job:
        job = Job(name=name, source_context=sc,
                  start_line=line or getattr(conf, 'start_line', None),
                  project_pipeline=project_pipeline)
        attrs = job.attributes
        for key, attr in _SIMPLE.items():
            if key in conf:
                attrs[attr] = conf[key]
        for flag in FLAG_ATTRIBUTES:
            setattr(job, flag, bool(conf.get(flag, False)))
        if 'parent' in conf:
            job.parent, job.parent_set = conf['parent'], True
        self._limits(job, conf)
        self._matchers(job, conf, sc)
        self._playbooks(job, conf, sc)
        self._collections(job, conf)
        self._secrets(job, conf, sc)
        self._variables(job, conf, sc)
        self._nodeset(job, conf)
        if 'ansible-version' in conf:
            attrs['ansible_version'] = str(conf['ansible-version'])
        if 'host' in conf:
            attrs['host'] = {'name': conf['host'], 'fingerprint': conf.get('fingerprint')}
        return job

    def _limits(self, job: Job, conf) -> None:
        limit = getattr(self.context, 'max_job_timeout', None)
        for key in ('timeout', 'post-timeout'):
            if key in conf and limit and conf[key] > limit:
                raise ConfigurationError(f'{key} {conf[key]} exceeds the tenant\'s '
                                         f'max-job-timeout of {limit}')
        if 'attempts' in conf and conf['attempts'] < 1:
            raise ConfigurationError('attempts must be at least 1')

    def _compile(self, values, what: str, sc: SourceContext) -> tuple:
        return compile_regexes(values, what, trusted=sc.trusted,
                               warnings=getattr(self.context, 'warnings', None))

    def _matchers(self, job: Job, conf, sc: SourceContext) -> None:
        if 'branches' in conf:
            patterns = _listify(conf['branches'])
            job.branch_patterns = tuple(pattern_text(p) for p in patterns)
            job.branch_matchers = self._compile(patterns, 'branches', sc)
        elif sc.implied_branches:
            job.branch_patterns = tuple(sc.implied_branches)
            job.branch_matchers = self._compile(sc.implied_branches, 'implied-branches', sc)
        elif sc.implicit_branch_matcher and sc.branch:
            job.branch_patterns = (sc.branch,)
            job.branch_matchers = (re2.compile(re2.escape(sc.branch) + '$'),)
        for key, attr, matchers in (('files', 'files', 'file_matchers'),
                                    ('irrelevant-files', 'irrelevant_files',
                                     'irrelevant_file_matchers')):
            if key in conf:
                patterns = _listify(conf[key])
                job.attributes[attr] = tuple(pattern_text(p) for p in patterns)
                setattr(job, matchers, self._compile(patterns, key, sc))

    def _playbooks(self, job: Job, conf, sc: SourceContext) -> None:
        roles = tuple(self._roles(conf))
        for key, attr in (('pre-run', 'pre_run'), ('run', 'run'), ('post-run', 'post_run'),
                          ('cleanup-run', 'cleanup_run')):
            if key not in conf:
                continue
            playbooks = []
            for entry in _listify(conf[key]):
                path = entry if isinstance(entry, str) else entry['name']
                sems = () if isinstance(entry, str) else tuple(
                    _listify(entry.get('semaphores') or entry.get('semaphore')))
                cleanup = False if isinstance(entry, str) else bool(entry.get('cleanup'))
                playbooks.append(PlaybookRef(path, sc, roles, tuple(self._secret_uses(conf)),
                                             sems, cleanup))
            job.attributes[attr] = tuple(playbooks)

    def _roles(self, conf):
        for role in conf.get('roles') or ():
            if 'zuul' in role:
                yield RoleRef(project=role['zuul'], name=role.get('name'))
            else:
                yield RoleRef(galaxy=role['galaxy'], name=role.get('name'))

    def _collections(self, job: Job, conf) -> None:
        attrs = job.attributes
        if 'roles' in conf:
            attrs['roles'] = tuple(self._roles(conf))
        projects = conf.get('required-projects', conf.get('repos'))
        if projects is not None:
            attrs['required_projects'] = tuple(
                RequiredProject(p) if isinstance(p, str) else
                RequiredProject(p['name'], p.get('override-checkout') or
                                p.get('override-branch'))
                for p in _listify(projects))
        for key in ('tags', 'provides', 'requires', 'allowed-projects', 'failure-output'):
            if key in conf:
                attrs[key.replace('-', '_')] = tuple(_listify(conf[key]))
        if 'allowed-branches' in conf:
            patterns = _listify(conf['allowed-branches'])
            self._compile(patterns, 'allowed-branches', job.source_context)
            attrs['allowed_branches'] = tuple(pattern_text(p) for p in patterns)
        if 'dependencies' in conf:
            attrs['dependencies'] = tuple(
                JobDependency(d) if isinstance(d, str) else
                JobDependency(d['name'], d.get('soft', False))
                for d in _listify(conf['dependencies']))
        sems = conf.get('semaphores', conf.get('semaphore'))
        if sems is not None:
            attrs['semaphores'] = tuple(_listify(sems))
        checkout = conf.get('override-checkout', conf.get('override-branch'))
        if checkout is not None:
            attrs['override_checkout'] = checkout
        if 'include-vars' in conf:
            attrs['include_vars'] = tuple(conf['include-vars'])

    def _secret_uses(self, conf) -> list[SecretUse]:
        raw = conf.get('secrets')
        if raw is None and isinstance(conf.get('auth'), dict):
            raw = conf['auth'].get('secrets')
        uses = []
        for s in _listify(raw):
            if isinstance(s, str):
                uses.append(SecretUse(s, s))
            else:
                uses.append(SecretUse(s['secret'], s['name'], s.get('pass-to-parent', False)))
        return uses

    def _secrets(self, job: Job, conf, sc: SourceContext) -> None:
        uses = self._secret_uses(conf)
        names = [u.alias for u in uses]
        if len(names) != len(set(names)):
            raise ConfigurationError('a job may not use two secrets with the same name')
        for u in uses:
            if u.alias in RESERVED_VARIABLE_ROOTS:
                raise ConfigurationError(f'secret name "{u.alias}" is reserved')
            # A secret is a variable of the playbooks it is given to (the
            # parent's too with pass-to-parent): named like a connection or
            # execution setting it would choose how Ansible runs them.
            check_variables({u.alias: None}, f'secret "{u.alias}" of job {job.name}',
                            trusted=sc.trusted)
        job.secrets = tuple(uses)
        if uses:
            # A job that uses secrets is post-review (seed 000: secrets are
            # not given to changes that nobody has reviewed yet), whatever
            # ``post-review`` this stanza sets; freezing keeps it so.
            job.attributes['post_review'] = True

    def _variables(self, job: Job, conf, sc: SourceContext) -> None:
        for key, attr in (('vars', 'vars'), ('extra-vars', 'extra_vars')):
            if key in conf:
                value = conf[key]
                check_variables(yamlutil.unwrap(value), f'{key} of job {job.name}',
                                trusted=sc.trusted)
                job.attributes[attr] = untrusted_text(value, sc)
        for key, attr in (('host-vars', 'host_vars'), ('group-vars', 'group_vars')):
            if key in conf:
                value = conf[key]
                for host, hv in (yamlutil.unwrap(value) or {}).items():
                    if not isinstance(hv, dict):
                        raise ConfigurationError(f'{key} of job {job.name}: "{host}" must '
                                                 'map to a dictionary of variables')
                    check_variables(hv, f'{key} {host} of job {job.name}',
                                    trusted=sc.trusted)
                job.attributes[attr] = untrusted_text(value, sc)

    def _nodeset(self, job: Job, conf) -> None:
        value = conf.get('nodeset', conf.get('nodes'))
        if value is None:
            return
        if isinstance(value, dict):
            nodes = value.get('nodes') or []
            names = [n.get('name') if isinstance(n, dict) else None for n in nodes]
            for n in names:
                if n in ('localhost',):
                    raise ConfigurationError('a node may not be named "localhost"')
            limit = getattr(self.context, 'max_nodes_per_job', None)
            if limit and len(nodes) > limit:
                raise ConfigurationError(f'the nodeset has {len(nodes)} nodes; the '
                                         f'tenant allows {limit} per job')
        job.attributes['nodeset'] = value


def _voluptuous_reason(e: vs.Invalid) -> str:
    path = '.'.join(str(p) for p in e.path)
    msg = e.msg
    if msg == 'extra keys not allowed':
        return f'unknown attribute "{path}"'
    return f'{msg} for "{path}"' if path else msg
