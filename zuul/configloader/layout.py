"""Loading a tenant's layout from its projects' configuration files.

The caller (the scheduler, through mergers; ``zuul-admin config-check``
from local checkouts) supplies the files as ConfigFile objects; this
module decides what they mean:

- which files of a repository are configuration (``select_config_files``:
  ``zuul.yaml`` or ``zuul.d/``, else ``.zuul.yaml`` or ``.zuul.d/``, plus
  the tenant's ``extra-config-paths``);
- the order: the seed's ``include:`` files, then config projects, then
  untrusted projects, each in main.yaml order, each project's default
  branch first;
- which object types each project may define (main.yaml include/exclude;
  pipelines only in config projects);
- the implicit branch matcher of seed 003 (untrusted projects with more
  than one branch, unless main.yaml or a ``pragma`` says otherwise);
- errors: a file that is not YAML, an unknown object type or an invalid
  object becomes a ConfigError naming file, line, object and reason, and
  loading goes on with everything else;
- limits on untrusted configuration (zuul/configloader/limits.py): an
  untrusted project-branch with too many bytes of config or too many jobs
  is not loaded, with one error saying so.
"""

from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass, replace

import re2

from zuul.configloader import unused
from zuul.configloader.job_parser import JobParser
from zuul.configloader.launcher_objects import LauncherObjectParser, resolve_providers
from zuul.configloader.limits import ConfigLimits
from zuul.configloader.nodeset import NodesetParser
from zuul.configloader.pipeline import PipelineParser
from zuul.configloader.pragma import Pragma, PragmaParser
from zuul.configloader.project import ProjectParser
from zuul.configloader.queue import QueueParser
from zuul.configloader.schema import LoadContext, line_of
from zuul.configloader.secret import SecretParser
from zuul.configloader.semaphore import SemaphoreParser
from zuul.lib import yamlutil
from zuul.model.errors import ConfigError, ConfigurationError, SourceContext
from zuul.model.freeze import validate_layout_jobs
from zuul.model.layout import Layout
from zuul.model.tenant import Tenant, TenantProject

log = logging.getLogger('zuul.configloader')

CONFIG_NAMES = ('zuul.yaml', 'zuul.d', '.zuul.yaml', '.zuul.d')

# Object types in the order they are parsed: later ones refer to earlier
# ones (project stanzas need the pipeline names, jobs the nodesets).
OBJECT_TYPES = ('pragma', 'pipeline', 'nodeset', 'secret', 'semaphore', 'queue',
                'image', 'flavor', 'label', 'section', 'provider', 'job',
                'project-template', 'project')
# Seed 001's node and image objects, in the order they are parsed.
LAUNCHER_TYPES = ('image', 'flavor', 'label', 'section', 'provider')
TRUSTED_ONLY = ('pipeline',)


@dataclass
class ConfigFile:
    """One configuration file of one project branch. ``project`` is None
    for the seed's ``include:`` files (trusted, outside any repository)."""

    path: str
    text: str
    project: TenantProject | None = None
    branch: str = ''


def select_config_files(paths, extra_paths=()) -> tuple[list[str], str | None]:
    """The configuration files among a repository's ``paths``, in the
    order they are read, and an error if the repository has both a file
    and a directory of the same kind (``zuul.yaml`` and ``zuul.d/``)."""
    paths = sorted(set(paths))
    chosen: list[str] = []
    error = None
    for plain, directory in (('zuul.yaml', 'zuul.d'), ('.zuul.yaml', '.zuul.d')):
        in_dir = [p for p in paths if p.startswith(directory + '/') and _is_yaml(p)]
        if plain in paths and in_dir:
            error = f'Multiple configuration files: both {plain} and {directory}/ exist'
        if plain in paths or in_dir:
            chosen = ([plain] if plain in paths else []) + in_dir
            break
    for extra in extra_paths:
        if extra.endswith('/'):
            chosen.extend(p for p in paths if p.startswith(extra) and _is_yaml(p)
                          and p not in chosen)
        elif extra in paths and extra not in chosen:
            chosen.append(extra)
    return chosen, error


def _is_yaml(path: str) -> bool:
    return path.endswith(('.yaml', '.yml'))


def filter_branches(project: TenantProject, branches) -> list[str]:
    """A project's branches after main.yaml's include-branches /
    exclude-branches (regexes); ``load-branch`` restricts loading to one.
    ``always-dynamic-branches`` are excluded too: their configuration is
    only ever loaded for a change on them (``is_always_dynamic``)."""
    out = list(branches)
    if project.include_branches:
        rx = [re2.compile(b) for b in project.include_branches]
        out = [b for b in out if any(r.fullmatch(b) for r in rx)]
    excluded = tuple(project.exclude_branches) + tuple(project.always_dynamic_branches)
    if excluded:
        rx = [re2.compile(b) for b in excluded]
        out = [b for b in out if not any(r.fullmatch(b) for r in rx)]
    return out


def is_always_dynamic(project: TenantProject | None, branch: str | None) -> bool:
    """True if ``branch`` matches the project's ``always-dynamic-branches``
    (and is not excluded otherwise): its configuration is left out of the
    tenant's layout and applied to each change on it as if the change
    proposed it."""
    if project is None or not branch or not project.always_dynamic_branches:
        return False
    if not any(re2.fullmatch(b, branch) for b in project.always_dynamic_branches):
        return False
    without = replace(project, always_dynamic_branches=())
    return filter_branches(without, [branch]) == [branch]


class LayoutLoader:
    """Builds Layout objects.

    ``registry`` is a zuul.driver.registry.DriverRegistry (pipeline
    triggers, requirements and reporters are validated by the driver of
    their connection); ``connections`` maps connection names to driver
    names (None: a connection is known by its driver's name);
    ``canonical_hostnames`` maps connection names to their canonical
    hostnames, so projects may be named canonically; ``limits`` bounds
    untrusted configuration (zuul/configloader/limits.py)."""

    def __init__(self, registry=None, connections: dict | None = None,
                 canonical_hostnames: dict | None = None,
                 limits: ConfigLimits | None = None):
        self.registry = registry
        self.connections = connections
        self.canonical_hostnames = canonical_hostnames or {}
        self.limits = limits or ConfigLimits()

    # -- entry point ----------------------------------------------------------

    def load(self, tenant: Tenant | None, files: list[ConfigFile],
             branches: dict | None = None, file_errors=()) -> Layout:
        """The layout of ``tenant`` from ``files``. ``branches`` maps
        (connection, project) to the project's branch names (used for the
        implicit branch matcher; by default the branches ``files`` have).
        ``file_errors`` are (TenantProject, branch, path, reason) problems
        the caller met while fetching, recorded like any other error."""
        tenant = tenant or Tenant(name='')
        layout = Layout(tenant.name)
        layout.default_parent = tenant.default_parent
        context = self._context(tenant)
        layout.project_names = dict(context.known_projects or {})
        for project, branch, path, reason in file_errors:
            layout.errors.add(ConfigError(reason, path=path, project=_pname(project),
                                          branch=branch))
        files = self._ordered(tenant, files)
        branches = self._branches(files, branches)
        files, too_big = self.limits.drop_oversized(files)
        layout.errors.extend(too_big)
        buckets: dict[str, list] = {t: [] for t in OBJECT_TYPES}
        for cf in files:
            self._read_file(layout, cf, branches, buckets)
        layout.errors.extend(self.limits.drop_excess_jobs(buckets))
        self._parse_all(layout, context, buckets)
        _add_global_semaphores(layout, tenant)
        self._validate(layout, tenant)
        log.debug('Tenant %s: loaded %d pipelines, %d jobs, %d projects, %d errors',
                  tenant.name, len(layout.pipelines), len(layout.jobs),
                  len(layout.project_configs), len(layout.errors))
        return layout

    def _context(self, tenant: Tenant) -> LoadContext:
        known = None
        if tenant.projects:
            known = {}
            for tp in tenant.projects:
                known.setdefault(tp.name, tp.name)
                host = self.canonical_hostnames.get(tp.connection)
                if host:
                    known[f'{host}/{tp.name}'] = tp.name
        return LoadContext(tenant=tenant, registry=self.registry,
                           connections=self.connections,
                           max_job_timeout=tenant.max_job_timeout,
                           max_nodes_per_job=tenant.max_nodes_per_job,
                           default_parent=tenant.default_parent, known_projects=known)

    @staticmethod
    def _ordered(tenant: Tenant, files: list[ConfigFile]) -> list[ConfigFile]:
        index = {id(tp): i for i, tp in enumerate(
            tenant.config_projects + tenant.untrusted_projects)}
        by_name = {(tp.connection, tp.name): i for i, tp in enumerate(
            tenant.config_projects + tenant.untrusted_projects)}

        def key(pair):
            pos, cf = pair
            if cf.project is None:
                return (-1, 0, '', pos)
            rank = index.get(id(cf.project),
                             by_name.get((cf.project.connection, cf.project.name), 1 << 30))
            trusted_rank = 0 if cf.project.trusted else 1
            branch_rank = 0 if cf.branch in ('master', 'main', '') else 1
            return (trusted_rank, rank, branch_rank, cf.branch, pos)
        return [cf for _, cf in sorted(enumerate(files), key=key)]

    @staticmethod
    def _branches(files, branches) -> dict:
        out = {k: list(v) for k, v in (branches or {}).items()}
        for cf in files:
            if cf.project is not None:
                key = (cf.project.connection, cf.project.name)
                if branches is None or key not in branches:
                    known = out.setdefault(key, [])
                    if cf.branch not in known:
                        known.append(cf.branch)
        return out

    # -- reading files ----------------------------------------------------------

    def _source_context(self, cf: ConfigFile, branches: dict) -> SourceContext:
        tp = cf.project
        if tp is None:
            return SourceContext(path=cf.path, trusted=True)
        implicit = False
        if not tp.trusted:
            if tp.implicit_branch_matcher is not None:
                implicit = tp.implicit_branch_matcher
            else:
                implicit = len(branches.get((tp.connection, tp.name), ())) > 1
        return SourceContext(project=tp.name, branch=cf.branch, path=cf.path,
                             trusted=tp.trusted, connection=tp.connection,
                             implicit_branch_matcher=implicit,
                             canonical_hostname=self.canonical_hostnames.get(
                                 tp.connection, ''))

    def _read_file(self, layout: Layout, cf: ConfigFile, branches: dict, buckets) -> None:
        sc = self._source_context(cf, branches)
        try:
            data = yamlutil.load(cf.text, path=cf.path)
        except yamlutil.YAMLLimitError as e:
            layout.errors.add(_error(sc, e.line, f'YAML limit exceeded: {e.reason}'))
            return
        except yamlutil.YAMLSyntaxError as e:
            layout.errors.add(_error(sc, e.line, f'YAML syntax error: {e.reason}'))
            return
        if data is None:
            return
        if not isinstance(data, list):
            layout.errors.add(_error(sc, line_of(data) or 1,
                                     'a configuration file must be a list of objects '
                                     '(each "- job:", "- project:", ...)'))
            return
        load_classes = cf.project.load_classes if cf.project is not None else None
        pragma = Pragma()
        entries = []
        item_lines = getattr(data, 'item_lines', ())
        for index, element in enumerate(data):
            line = item_lines[index] if index < len(item_lines) else line_of(element)
            if not isinstance(element, dict) or len(element) != 1:
                layout.errors.add(_error(sc, line, 'each configuration object must be a '
                                         'mapping with one key naming its type'))
                continue
            kind, conf = next(iter(element.items()))
            if kind not in OBJECT_TYPES:
                layout.errors.add(_error(sc, line, f'unknown configuration object type '
                                         f'"{kind}"', kind))
                continue
            if load_classes is not None and kind not in load_classes:
                continue
            if not isinstance(conf, dict):
                layout.errors.add(_error(sc, line, f'a {kind} must be a mapping', kind))
                continue
            if isinstance(conf, yamlutil.MarkedDict) and line:
                conf.start_line = line    # objects are located by their "- kind:" line
            if kind == 'pragma':
                try:
                    PragmaParser().parse(conf, pragma)
                except ConfigurationError as e:
                    layout.errors.add(_error(sc, line, e.reason, kind))
                continue
            entries.append((kind, conf, line))
        if pragma.implicit_branch_matcher is not None:
            sc = replace(sc, implicit_branch_matcher=pragma.implicit_branch_matcher)
        if pragma.implied_branches:
            sc = replace(sc, implied_branches=tuple(pragma.implied_branches))
        for kind, conf, line in entries:
            buckets[kind].append((conf, sc, line))

    # -- parsing -----------------------------------------------------------------

    def _parse_all(self, layout: Layout, context: LoadContext, buckets) -> None:
        pipeline_parser = PipelineParser(context)
        nodeset_parser = NodesetParser(context)
        job_parser = JobParser(context)
        project_parser = ProjectParser(context)
        simple = {'nodeset': (nodeset_parser.parse, 'nodesets'),
                  'secret': (SecretParser(context).parse, 'secrets'),
                  'semaphore': (SemaphoreParser(context).parse, 'semaphores'),
                  'queue': (QueueParser(context).parse, 'queues')}
        for conf, sc, line in buckets['pipeline']:
            with _Recording(layout, context, sc, line, 'pipeline', conf):
                if not sc.trusted:
                    raise ConfigurationError('pipelines may only be defined in config '
                                             'projects')
                context.warnings.extend(unused.pipeline_warnings(conf))
                pipeline = pipeline_parser.parse(conf, sc)
                pipeline.tenant_name = layout.tenant_name
                for problem in pipeline_parser.problems:
                    layout.errors.add(_error(sc, line, problem, 'pipeline', pipeline.name))
                layout.add_unique('pipelines', pipeline)
        context.pipeline_names = set(layout.pipelines)
        context.pipelines_known = bool(context.tenant and context.tenant.projects) or \
            bool(layout.pipelines)
        for kind in ('nodeset', 'secret', 'semaphore', 'queue'):
            parse, table = simple[kind]
            for conf, sc, line in buckets[kind]:
                with _Recording(layout, context, sc, line, kind, conf):
                    layout.add_unique(table, parse(conf, sc))
        launcher_parser = LauncherObjectParser(context)
        for kind in LAUNCHER_TYPES:
            for conf, sc, line in buckets[kind]:
                with _Recording(layout, context, sc, line, kind, conf):
                    layout.add_unique(kind + 's', launcher_parser.parse(kind, conf, sc))
        owners: dict[str, str] = {}
        shadows = _shadow_map(context.tenant)
        for conf, sc, line in buckets['job']:
            with _Recording(layout, context, sc, line, 'job', conf):
                context.warnings.extend(unused.job_warnings(conf))
                job = job_parser.parse_job(conf, sc)
                if self._shadowed(job, sc, owners, shadows):
                    continue
                layout.add_job(job)
        for conf, sc, line in buckets['project-template']:
            with _Recording(layout, context, sc, line, 'project-template', conf):
                layout.add_project_template(project_parser.parse_template(conf, sc))
        for conf, sc, line in buckets['project']:
            with _Recording(layout, context, sc, line, 'project', conf):
                layout.add_project_config(project_parser.parse_project(conf, sc))

    @staticmethod
    def _shadowed(job, sc: SourceContext, owners: dict, shadows: dict) -> bool:
        """Released rule: a job is defined by one project; another
        project defining a job of that name is an error, unless that
        project lists the first in ``shadow:``, when its definition is
        silently ignored."""
        owner = owners.setdefault(job.name, sc.project)
        if owner == sc.project:
            return False
        if owner in shadows.get(sc.project, ()):
            return True
        raise ConfigurationError(f'job "{job.name}" in {sc.project or "<include>"} is not '
                                 f'permitted to shadow job "{job.name}" in '
                                 f'{owner or "<include>"}')

    # -- whole-layout checks -------------------------------------------------------

    def _validate(self, layout: Layout, tenant: Tenant) -> None:
        for err in validate_layout_jobs(layout, tenant.default_parent):
            layout.errors.add(err)
        for configs in list(layout.project_configs.values()) + \
                [[c] for _, c in layout.project_regexes] + \
                list(layout.project_templates.values()):
            for config in configs:
                for reason in self._project_problems(layout, config):
                    kind = 'project-template' if config.is_template else 'project'
                    layout.errors.add(_error(config.source_context, config.start_line,
                                             reason, kind, config.name))
        self._tenant_restrictions(layout, tenant)
        layout.resolved_providers = resolve_providers(layout, tenant, layout.errors,
                                                      self.connections)
        if not tenant.use_nodepool:
            self._undefined_labels(layout)

    @staticmethod
    def _undefined_labels(layout: Layout) -> None:
        """A tenant with ``use-nodepool: false`` serves every node from
        ``label`` objects: a nodeset (or a job's inline nodeset) naming any
        other label is an error. Otherwise such labels go to Nodepool."""
        for nodeset in layout.nodesets.values():
            for label in nodeset.labels:
                if label not in layout.labels:
                    layout.errors.add(_error(
                        nodeset.source_context, nodeset.start_line,
                        f'the label "{label}" is not defined by a label object (the '
                        'tenant does not use Nodepool)', 'nodeset', nodeset.name))
        jobs = [job for variants in layout.jobs.values() for job in variants]
        for configs in list(layout.project_configs.values()) + \
                [[c] for _, c in layout.project_regexes] + \
                list(layout.project_templates.values()):
            for config in configs:
                for ppc in config.pipelines.values():
                    jobs.extend(ppc.job_list)
        for job in jobs:
            for label in _inline_labels(job.attributes.get('nodeset')):
                if label not in layout.labels:
                    layout.errors.add(_error(
                        job.source_context, job.start_line,
                        f'nodeset: the label "{label}" is not defined by a label '
                        'object (the tenant does not use Nodepool)', 'job', job.name))

    @staticmethod
    def _project_problems(layout: Layout, config):
        for name in config.templates:
            if name not in layout.project_templates:
                yield f'unknown project-template "{name}"'
        for pipeline_name, ppc in config.pipelines.items():
            for job in ppc.job_list:
                if job.name not in layout.jobs:
                    yield f'{pipeline_name}: job "{job.name}" is not defined'
                nodeset = job.attributes.get('nodeset')
                if isinstance(nodeset, str) and nodeset not in layout.nodesets:
                    yield f'{pipeline_name}: job "{job.name}": unknown nodeset "{nodeset}"'
                for use in job.secrets:
                    if use.name not in layout.secrets:
                        yield f'{pipeline_name}: job "{job.name}": unknown secret ' \
                            f'"{use.name}"'

    @staticmethod
    def _tenant_restrictions(layout: Layout, tenant: Tenant) -> None:
        checks = (('triggers', tenant.allowed_triggers, 'allowed-triggers'),)
        for pipeline in layout.pipelines.values():
            for attr, allowed, option in checks:
                for connection in getattr(pipeline, attr):
                    if allowed is not None and connection not in allowed:
                        layout.errors.add(_error(
                            pipeline.source_context, pipeline.start_line,
                            f'trigger connection "{connection}" is not in the tenant\'s '
                            f'{option}', 'pipeline', pipeline.name))
            if tenant.allowed_reporters is not None:
                for action in pipeline.reporters.values():
                    for connection in action:
                        if connection not in tenant.allowed_reporters:
                            layout.errors.add(_error(
                                pipeline.source_context, pipeline.start_line,
                                f'reporter connection "{connection}" is not in the '
                                'tenant\'s allowed-reporters', 'pipeline', pipeline.name))
        if tenant.allowed_labels is None and not tenant.disallowed_labels:
            return
        for nodeset in layout.nodesets.values():
            for label in nodeset.labels:
                reason = _label_problem(tenant, label)
                if reason:
                    layout.errors.add(_error(nodeset.source_context, nodeset.start_line,
                                             reason, 'nodeset', nodeset.name))


def _add_global_semaphores(layout: Layout, tenant: Tenant) -> None:
    """The tenant file's global semaphores this tenant lists join its
    layout; an in-repo semaphore of the same name is an error and the
    global one is used (released behaviour)."""
    for name, sem in (getattr(tenant, 'global_semaphores', None) or {}).items():
        local = layout.semaphores.get(name)
        if local is not None and not getattr(local, 'is_global', False):
            layout.errors.add(_error(
                local.source_context, local.start_line,
                f'semaphore "{name}" is a global semaphore of this tenant; this '
                'definition is ignored', 'semaphore', name))
        layout.semaphores[name] = sem


def _inline_labels(value) -> list[str]:
    """Labels of a job's inline nodeset (a mapping with ``nodes``, or the
    seed's bare list of nodes); a nodeset name yields nothing."""
    if isinstance(value, dict):
        value = value.get('nodes')
    if isinstance(value, dict):
        value = [value]
    out = []
    for node in value if isinstance(value, list) else ():
        if isinstance(node, dict):
            label = node.get('label') or node.get('image')
            if isinstance(label, str):
                out.append(label)
    return out


def _label_problem(tenant: Tenant, label: str) -> str | None:
    if tenant.allowed_labels is not None and not any(
            re2.fullmatch(p, label) for p in tenant.allowed_labels):
        return f'the label "{label}" is not in the tenant\'s allowed-labels'
    if tenant.disallowed_labels and any(re2.fullmatch(p, label)
                                        for p in tenant.disallowed_labels):
        return f'the label "{label}" is in the tenant\'s disallowed-labels'
    return None


def _shadow_map(tenant) -> dict:
    """project -> the projects it shadows: where both define a job, the
    shadowed (earlier) project's definition is used and this project's is
    ignored (main.yaml ``shadow:``)."""
    return {tp.name: set(tp.shadow) for tp in getattr(tenant, 'projects', ()) or ()}


def _pname(project) -> str:
    return project.name if project is not None else ''


def _error(sc: SourceContext, line, reason: str, object_type: str = '',
           object_name: str = '', severity: str = 'error') -> ConfigError:
    return ConfigError(reason, path=sc.path, line=line, object_type=object_type,
                       object_name=object_name or '', project=sc.project, branch=sc.branch,
                       severity=severity)


class _Recording:
    """Turn a parser's ConfigurationError into a recorded ConfigError."""

    def __init__(self, layout: Layout, context: LoadContext, sc: SourceContext, line,
                 kind: str, conf):
        self.layout, self.context = layout, context
        self.sc, self.line, self.kind = sc, line, kind
        name = conf.get('name') if isinstance(conf, dict) else None
        self.name = name if isinstance(name, str) else ''

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        for warning in self.context.warnings:
            self.layout.errors.add(_error(self.sc, self.line, warning, self.kind, self.name,
                                          severity='warning'))
        self.context.warnings.clear()
        if exc_type is not None and issubclass(exc_type, ConfigurationError):
            if not self.name and self.kind == 'project' and self.sc.project:
                self.name = self.sc.project
            self.layout.errors.add(_error(self.sc, exc.line or self.line, exc.reason,
                                          self.kind, self.name))
            return True
        return False


def read_repo_config(root: str, project: TenantProject | None, branch: str,
                     extra_paths=()) -> tuple[list[ConfigFile], list]:
    """Configuration files of a local checkout at ``root`` (for
    ``zuul-admin config-check`` and tests): (files, file errors)."""
    import os
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != '.git']
        rel = os.path.relpath(dirpath, root)
        for name in filenames:
            paths.append(posixpath.normpath(posixpath.join(rel.replace(os.sep, '/'), name)))
    chosen, error = select_config_files(paths, extra_paths)
    errors = [(project, branch, '', error)] if error else []
    files = []
    for path in chosen:
        with open(os.path.join(root, path), encoding='utf-8', errors='replace') as f:
            files.append(ConfigFile(path=path, text=f.read(), project=project, branch=branch))
    return files, errors
