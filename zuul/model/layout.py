"""The layout: every configuration object of one tenant, as loaded.

Built by zuul/configloader/layout.py; read by freezing
(zuul/model/freeze.py), the pipeline managers and the web API."""

from __future__ import annotations

import re2

from zuul.model.errors import ConfigErrorList, ConfigurationError
from zuul.model.project import ProjectConfig, ProjectPipelineConfig


def short_name(name: str) -> str:
    """``review.example.org/org/project`` -> ``org/project``; a short
    name is returned unchanged."""
    parts = name.split('/')
    if len(parts) > 2 and '.' in parts[0]:
        return '/'.join(parts[1:])
    return name


class Layout:
    """A tenant's objects. Unique objects (pipelines, nodesets, secrets,
    semaphores, queues) are dicts by name; jobs are lists of variants by
    name; projects and project-templates are lists of stanzas by name, in
    load order."""

    def __init__(self, tenant_name: str = ''):
        self.tenant_name = tenant_name
        self.pipelines: dict = {}
        self.jobs: dict[str, list] = {}
        self.nodesets: dict = {}
        self.secrets: dict = {}
        self.semaphores: dict = {}
        self.queues: dict = {}
        # Seed 001's node and image objects (zuul/model/launcher.py), by
        # short name; unique per tenant like pipelines.
        self.images: dict = {}
        self.flavors: dict = {}
        self.labels: dict = {}
        self.sections: dict = {}
        self.providers: dict = {}
        # canonical provider name -> ResolvedProvider, set by the loader
        # (zuul.configloader.launcher_objects.resolve_providers). Only the
        # live layout's is ever published to zuul-launcher.
        self.resolved_providers: dict = {}
        self.project_templates: dict[str, list[ProjectConfig]] = {}
        self.project_configs: dict[str, list[ProjectConfig]] = {}
        self.project_regexes: list[tuple] = []    # (compiled, ProjectConfig)
        self.errors = ConfigErrorList()
        self.default_parent = 'base'
        # Every accepted project name (short and canonical) -> the name
        # its stanzas are stored under; set by the loader for a tenant.
        self.project_names: dict[str, str] = {}

    # -- adding -------------------------------------------------------------

    def add_job(self, job) -> None:
        self.jobs.setdefault(job.name, []).append(job)

    def get_job_variants(self, name: str) -> list:
        return list(self.jobs.get(name, ()))

    def add_unique(self, kind: str, obj) -> None:
        """Add a pipeline/nodeset/secret/semaphore/queue (or an image,
        flavor, label, section or provider). A second
        definition is an error, except an identical one from another branch
        of the same project (branching must not break the config)."""
        table = getattr(self, kind)
        old = table.get(obj.name)
        if old is not None:
            same_project = old.source_context.project == obj.source_context.project \
                and old.source_context.project
            if same_project and old.source_context.branch != obj.source_context.branch \
                    and old.same_definition(obj):
                return
            raise ConfigurationError(f'{_singular(kind)} "{obj.name}" is already defined '
                                     f'at {old.location}')
        table[obj.name] = obj

    def add_project_template(self, template: ProjectConfig) -> None:
        self.project_templates.setdefault(template.name, []).append(template)

    def add_project_config(self, config: ProjectConfig) -> None:
        if config.name.startswith('^'):
            self.project_regexes.append((re2.compile(config.name), config))
            return
        self.project_configs.setdefault(config.name, []).append(config)

    # -- queries ------------------------------------------------------------

    def get_project_configs(self, project_name: str) -> list[ProjectConfig]:
        """Every stanza for the project (by any of its names), regex
        stanzas first, then by name, each in load order."""
        stored = self.project_names.get(project_name, project_name)
        names = {stored, short_name(stored)} | self._aliases().get(stored, set())
        out = [cfg for rx, cfg in self.project_regexes
               if any(rx.match(n) for n in names)]
        for name in names:
            out.extend(self.project_configs.get(name, ()))
        if not self.project_names and stored == short_name(stored):
            # Without a tenant: a short name may have been configured by
            # its canonical name.
            suffix = '/' + stored
            for name, configs in self.project_configs.items():
                if name.endswith(suffix) and short_name(name) == stored:
                    out.extend(configs)
        return out

    def _aliases(self) -> dict[str, set]:
        if getattr(self, '_alias_index', None) is None:
            index: dict[str, set] = {}
            for alias, stored in self.project_names.items():
                index.setdefault(stored, set()).add(alias)
            self._alias_index = index
        return self._alias_index

    def get_project_pipeline_config(self, project_name: str, pipeline_name: str,
                                    branch: str | None) -> ProjectPipelineConfig | None:
        """The jobs and settings the project has in the pipeline for
        ``branch``: for each matching stanza in order, its templates' then
        its own pipeline section. None if the project is not in the
        pipeline."""
        result = None
        configs = self.get_project_configs(project_name)
        project_queue = None
        for config in configs:
            if not config.applies_to_branch(branch):
                continue
            if config.queue_name:
                project_queue = config.queue_name
            for section in self._sections(config, pipeline_name, branch):
                if result is None:
                    result = ProjectPipelineConfig()
                result.merge(section)
        if result is not None and result.queue_name is None:
            result.queue_name = project_queue
        return result

    def _sections(self, config: ProjectConfig, pipeline_name: str, branch):
        for template_name in config.templates:
            for template in self.project_templates.get(template_name, ()):
                if template.applies_to_branch(branch) and \
                        pipeline_name in template.pipelines:
                    yield template.pipelines[pipeline_name]
        if pipeline_name in config.pipelines:
            yield config.pipelines[pipeline_name]

    def get_project_metadata(self, project_name: str) -> dict:
        """default-branch, merge-mode, queue and vars merged over stanzas."""
        meta = {'default_branch': 'master', 'merge_mode': 'merge-resolve',
                'queue_name': None, 'variables': {}}
        for config in self.get_project_configs(project_name):
            for attr in ('default_branch', 'merge_mode', 'queue_name'):
                if getattr(config, attr):
                    meta[attr] = getattr(config, attr)
            meta['variables'].update(config.variables)
        return meta

    def project_pipeline_names(self, project_name: str) -> list[str]:
        names = []
        for config in self.get_project_configs(project_name):
            for template_name in config.templates:
                for template in self.project_templates.get(template_name, ()):
                    names.extend(n for n in template.pipelines if n not in names)
            names.extend(n for n in config.pipelines if n not in names)
        return names


def _singular(kind: str) -> str:
    return {'pipelines': 'pipeline', 'nodesets': 'nodeset', 'secrets': 'secret',
            'semaphores': 'semaphore', 'queues': 'queue', 'images': 'image',
            'flavors': 'flavor', 'labels': 'label', 'sections': 'section',
            'providers': 'provider'}.get(kind, kind)
