"""``- project:`` and ``- project-template:`` stanzas.

A project stanza has a few attributes of its own (templates, default
branch, merge mode, queue, vars) and one section per pipeline, keyed by
the pipeline's name, holding the jobs the project runs there. Which keys
are pipelines is known once the tenant's pipelines are loaded; a key that
is neither an attribute nor a pipeline is an error naming it."""

from __future__ import annotations

import re2
import voluptuous as vs

from zuul.configloader.job_parser import (
    JobParser,
    check_variables,
    compile_regexes,
    untrusted_text,
)
from zuul.configloader.schema import as_list, line_of, scalar_or_list, validate
from zuul.model.errors import ConfigurationError, SourceContext
from zuul.model.project import MERGE_MODES, ProjectConfig, ProjectPipelineConfig

PIPELINE_SECTION_SCHEMA = vs.Schema({
    'jobs': vs.Any(None, list),
    'queue': str,
    'debug': bool,
    'fail-fast': bool,
})

PROJECT_ATTRIBUTES = {
    'name': str,
    'description': str,
    'templates': scalar_or_list(str),
    'default-branch': str,
    'merge-mode': vs.Any(*MERGE_MODES),
    'queue': str,
    'vars': dict,
}
TEMPLATE_ATTRIBUTES = {
    vs.Required('name'): str,
    'description': str,
    'queue': str,
    'vars': dict,
}


class ProjectParser:
    """Builds ProjectConfig objects for projects and project-templates.

    ``context`` is a zuul.configloader.schema.LoadContext: its
    ``pipeline_names`` (when not empty) decide which keys are pipeline
    sections, and ``resolve_project`` maps the stanza's name to the
    tenant's project."""

    def __init__(self, context):
        self.context = context
        self.job_parser = JobParser(context)

    def parse_template(self, conf, source_context: SourceContext) -> ProjectConfig:
        attrs, sections = self._split(conf, TEMPLATE_ATTRIBUTES)
        validate(vs.Schema(TEMPLATE_ATTRIBUTES), attrs)
        template = ProjectConfig(name=conf['name'], source_context=source_context,
                                 start_line=line_of(conf), is_template=True,
                                 description=conf.get('description'),
                                 queue_name=conf.get('queue'))
        self._common(template, conf, sections, source_context)
        return template

    def parse_project(self, conf, source_context: SourceContext) -> ProjectConfig:
        attrs, sections = self._split(conf, PROJECT_ATTRIBUTES)
        validate(vs.Schema(PROJECT_ATTRIBUTES), attrs)
        name = self._project_name(conf.get('name'), source_context)
        project = ProjectConfig(name=name, source_context=source_context,
                                start_line=line_of(conf),
                                description=conf.get('description'),
                                templates=as_list(conf.get('templates')),
                                default_branch=conf.get('default-branch'),
                                merge_mode=conf.get('merge-mode'),
                                queue_name=conf.get('queue'))
        self._common(project, conf, sections, source_context)
        return project

    # -- parts -------------------------------------------------------------------

    def _split(self, conf, attributes: dict):
        """(attribute mapping, {pipeline name: section})."""
        known = {str(k) for k in attributes}
        strict = self.context is not None and self.context.pipelines_known
        pipelines = self.context.pipeline_names if strict else set()
        attrs, sections = {}, {}
        for key, value in conf.items():
            if key in known:
                attrs[key] = value
            elif not strict or key in pipelines:
                sections[key] = value
            else:
                raise ConfigurationError(f'"{key}" is neither a project attribute nor a '
                                         'pipeline of this tenant')
        return attrs, sections

    def _project_name(self, name: str | None, sc: SourceContext) -> str:
        if name is None:
            if not sc.project:
                raise ConfigurationError('a project stanza outside a project repository '
                                         'needs a "name"')
            return sc.project
        if name.startswith('^'):
            if not sc.trusted:
                raise ConfigurationError('only config projects may use a regex project '
                                         f'name ("{name}")')
            compile_regexes([name], 'project name', trusted=True)
            return name
        resolved = self.context.resolve_project(name) if self.context is not None else name
        if resolved is None:
            raise ConfigurationError(f'unknown project "{name}" (not in this tenant)')
        if not sc.trusted and sc.project and resolved != sc.project and \
                not self._may_configure(sc.project, resolved):
            raise ConfigurationError(f'project {sc.project} may not configure another '
                                     f'project ("{name}"); only config projects may, and '
                                     'projects whose configure-projects lists it')
        return resolved

    def _may_configure(self, source: str, target: str) -> bool:
        """The tenant file's ``configure-projects`` of ``source``: names or
        RE2 regexes of the untrusted projects it may configure."""
        tenant = getattr(self.context, 'tenant', None)
        projects = getattr(tenant, 'projects', None) or ()
        granted = next((tp.configure_projects for tp in projects if tp.name == source), ())
        target_tp = next((tp for tp in projects if tp.name == target), None)
        if not granted or target_tp is None or target_tp.trusted:
            return False
        aliases = [n for n, stored in (self.context.known_projects or {}).items()
                   if stored == target] or [target]
        for pattern in granted:
            if self.context.resolve_project(pattern) == target:
                return True
            try:
                if any(re2.fullmatch(pattern, alias) for alias in aliases):
                    return True
            except re2.error:
                continue
        return False

    def _common(self, obj: ProjectConfig, conf, sections: dict, sc: SourceContext) -> None:
        if 'vars' in conf:
            check_variables(conf['vars'], f'vars of {obj.name}', trusted=sc.trusted)
            obj.variables = untrusted_text(dict(conf['vars']), sc)
        if sc.implied_branches:
            obj.branch_matchers = compile_regexes(sc.implied_branches, 'implied-branches',
                                                  trusted=sc.trusted)
        elif sc.implicit_branch_matcher and sc.branch:
            obj.branch_matcher = sc.branch
        for pipeline_name, section in sections.items():
            obj.pipelines[pipeline_name] = self._section(pipeline_name, section or {}, sc)

    def _section(self, pipeline_name: str, section, sc: SourceContext) -> ProjectPipelineConfig:
        if not isinstance(section, dict):
            raise ConfigurationError(f'pipeline "{pipeline_name}" must be a mapping (with '
                                     '"jobs")')
        validate(PIPELINE_SECTION_SCHEMA, dict(section), pipeline_name)
        ppc = ProjectPipelineConfig(queue_name=section.get('queue'),
                                    debug=section.get('debug'),
                                    fail_fast=section.get('fail-fast'))
        for entry in section.get('jobs') or ():
            try:
                ppc.job_list.append(self.job_parser.parse_project_pipeline_job(entry, sc))
            except ConfigurationError as e:
                raise ConfigurationError(f'{pipeline_name}: {e.reason}',
                                         line=getattr(entry, 'start_line', None)) from None
        return ppc
