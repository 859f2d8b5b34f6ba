"""What ``zuul-admin config-check`` adds to loading a layout: freezing the
job graph of every project-pipeline, as the scheduler does for each item
(zuul.model.freeze.freeze_job_graph, zuul/scheduler/layouts.py), so that
an error the scheduler would only meet when a change arrives (a job whose
parent does not exist, a post-review job in a pre-review pipeline, a
dependency cycle, an unknown nodeset ...) is found before it merges.

Each problem becomes a ConfigError located at the project-pipeline entry
that lists the job (file and line), naming the project, the branch and
the pipeline. A problem that many projects share (a project-template
used everywhere) is reported once, with the number of other projects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zuul.model.errors import ConfigError
from zuul.model.freeze import freeze_job_graph


@dataclass
class FreezeStats:
    projects: int = 0            # projects with at least one project-pipeline
    project_pipelines: int = 0   # job graphs frozen
    jobs: int = 0                # jobs frozen (summed over job graphs)


def check_job_graphs(layout, projects, branch: str | None,
                     default_parent: str = 'base') -> tuple[list[ConfigError], FreezeStats]:
    """Freeze every project-pipeline of ``projects`` (names) on ``branch``
    for an item whose changed files are unknown (every file matcher
    matches). Returns (errors, statistics)."""
    stats = FreezeStats()
    found: dict[tuple, ConfigError] = {}
    others: dict[tuple, int] = {}
    for project in projects:
        froze_any = False
        for pipeline_name in layout.project_pipeline_names(project):
            pipeline = layout.pipelines.get(pipeline_name)
            if pipeline is None:
                continue    # already a load error (no such pipeline)
            ppc = layout.get_project_pipeline_config(project, pipeline_name, branch)
            if ppc is None or not ppc.job_list:
                continue
            graph, problems = freeze_job_graph(layout, project, pipeline, branch, None,
                                               default_parent, ppc.job_list)
            problems = list(problems) + _nodeset_problems(layout, graph)
            froze_any = True
            stats.project_pipelines += 1
            stats.jobs += len(graph.jobs)
            for problem in problems:
                if _reported_at_load(layout, problem):
                    continue
                variant = _variant_for(problem, ppc.job_list)
                sc = getattr(variant, 'source_context', None)
                line = getattr(variant, 'start_line', None) or \
                    _stanza_line(layout, project, pipeline_name, variant)
                key = (getattr(sc, 'project', ''), getattr(sc, 'path', ''), line,
                       pipeline_name, problem)
                if key in found:
                    others[key] += 1
                    continue
                others[key] = 0
                found[key] = ConfigError(
                    f'{pipeline_name}: project {project} branch {branch or "(any)"}: '
                    f'job graph cannot be frozen: {problem}',
                    path=getattr(sc, 'path', ''), line=line,
                    object_type='project-pipeline', object_name=project,
                    project=getattr(sc, 'project', ''), branch=getattr(sc, 'branch', ''))
        stats.projects += froze_any
    errors = []
    for key, error in found.items():
        if others[key]:
            error.reason += f' (and {others[key]} other project(s))'
        errors.append(error)
    return errors, stats


_NOT_DEFINED = re.compile(r'^Job "([^"]+)" not defined$')


def _reported_at_load(layout, problem: str) -> bool:
    """A job the project-pipeline lists but nobody defines: the loader
    has reported it at that very entry already."""
    m = _NOT_DEFINED.match(problem)
    return bool(m) and m.group(1) not in layout.jobs


def _nodeset_problems(layout, graph) -> list[str]:
    """A frozen job naming a nodeset the layout does not have, or an
    anonymous nodeset that does not parse: no node request could be made
    for it."""
    from zuul.configloader.nodeset import NodesetParser
    from zuul.model.errors import ConfigurationError
    problems = []
    for name, frozen in graph.jobs.items():
        value = frozen.get('nodeset')
        if isinstance(value, str):
            if value not in layout.nodesets:
                problems.append(f'Job "{name}" uses the unknown nodeset "{value}"')
        elif value is not None:
            try:
                NodesetParser().parse({'nodes': value} if isinstance(value, list) else value,
                                      frozen.source_context, anonymous=True)
            except ConfigurationError as e:
                problems.append(f'Job "{name}" has an invalid nodeset: {e.reason}')
            except Exception as e:  # noqa: BLE001 - report, never crash the check
                problems.append(f'Job "{name}" has an invalid nodeset: {e}')
    return problems


def _variant_for(problem: str, job_list):
    """The project-pipeline entry a problem is about: the job of the list
    named first in the message."""
    best, best_pos = None, None
    for variant in job_list:
        name = variant.name
        m = re.search(rf'(?:^|[\s"(]){re.escape(name)}(?:$|[\s":)])', problem)
        if m and (best_pos is None or m.start() < best_pos):
            best, best_pos = variant, m.start()
    return best if best is not None else (job_list[0] if job_list else None)


def _stanza_line(layout, project: str, pipeline_name: str, variant) -> int | None:
    """The line of the project or project-template stanza listing
    ``variant`` (a job given by name alone carries no line of its own)."""
    for config in layout.get_project_configs(project):
        stanzas = [config] + [t for name in config.templates
                              for t in layout.project_templates.get(name, ())]
        for stanza in stanzas:
            section = stanza.pipelines.get(pipeline_name)
            if section is not None and any(v is variant for v in section.job_list):
                return stanza.start_line
    return None


def project_names(layout, tenant=None) -> list[str]:
    """The projects whose project-pipelines are frozen: a tenant's
    projects, or (a layout of checkouts without a tenant) every project
    named by a project stanza."""
    if tenant is not None and tenant.projects:
        return [tp.name for tp in tenant.projects]
    return list(layout.project_configs)
