"""Late-binding job freezing (seed 003).

For a queue item, a job is built by walking depth-first up the parent
chain from the job's matching variants, applying at each level every
variant whose matchers match the item, in configuration order, and then
the project-pipeline variants. The walk is recorded (``inheritance_path``)
so users can see how a job came to be.

Example from seed 003 (variants numbered in load order)::

        0 base
         /    \\
  1 devstack  2 devstack  4 altbase
         \\    /             |
       3 tempest        5 tempest
          /  \\
     6 foo  7 foo

freezes ``foo`` as 0, 1, 2, 3, 4, 5, 6, 7.

The walk is iterative and bounded: a job whose chain of parents is longer
than MAX_INHERITANCE_DEPTH cannot be frozen (untrusted config could
otherwise make freezing arbitrarily deep and slow).

``post-review`` is sticky: once a variant applied while freezing sets it,
or uses a secret, no later variant can turn it off; and a job that has
secrets runs only in a post-review pipeline whatever it says.

A secret is bound to the playbooks of the variant that lists it; with
``pass-to-parent`` it also joins every playbook of the job's parent jobs
(those applied before the variant, under another job name), unless that
playbook already has a secret of the same variable name.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

import re2

from zuul.lib import yamlutil
from zuul.model.errors import ConfigError, ConfigurationError
from zuul.model.job import (
    ACCUMULATE,
    ATTRIBUTE_SEMANTICS,
    DEFAULTS,
    INTERSECT,
    MERGE,
    PREPEND,
    STICKY_TRUE,
    UNION,
    Job,
)

PLAYBOOK_PHASES = ('pre_run', 'run', 'post_run', 'cleanup_run')

# The longest chain of jobs, from a job up to its base job (both
# included), that freezing accepts. Real configurations stay below 15.
MAX_INHERITANCE_DEPTH = 100


class FreezeError(ConfigurationError):
    """A job that cannot be frozen for this item (abstract, final
    violated, unknown parent, inheritance cycle ...)."""


def deep_merge(base: dict, override: dict) -> dict:
    """Child values win; nested dicts merge recursively."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


@dataclass
class FrozenJob:
    """A job ready to run for one item."""

    name: str
    attributes: dict = field(default_factory=dict)
    secrets: dict = field(default_factory=dict)      # alias -> (secret name, project)
    inheritance_path: list[str] = field(default_factory=list)
    variants: list[Job] = field(default_factory=list)
    source_context: object = None
    final_from: str | None = None
    # The nodesets to request, in order, after the one ``nodeset`` names
    # fails (a nodeset's ``alternatives``, flattened; names or inline
    # definitions).
    nodeset_alternatives: list = field(default_factory=list)

    def get(self, attr: str, default=None):
        if attr in self.attributes:
            return self.attributes[attr]
        return DEFAULTS.get(attr, default)

    @property
    def voting(self) -> bool:
        return bool(self.get('voting', True))

    @property
    def dependencies(self):
        return self.get('dependencies') or ()

    @property
    def uses_secrets(self) -> bool:
        """Whether any variant applied (or any playbook) brings a secret,
        pass-to-parent ones included."""
        if self.secrets:
            return True
        return any(ref.secrets for phase in PLAYBOOK_PHASES
                   for ref in self.playbooks(phase) if hasattr(ref, 'secrets'))

    @property
    def post_review(self) -> bool:
        return bool(self.get('post_review', False)) or self.uses_secrets

    def playbooks(self, phase: str):
        return self.get(phase) or ()

    def to_dict(self) -> dict:
        """Plain data (web API, show-job, executor payload building)."""
        out = {'name': self.name, 'inheritance_path': list(self.inheritance_path)}
        for key, value in sorted(self.attributes.items()):
            out[key] = _plain(value)
        for key, value in DEFAULTS.items():
            out.setdefault(key, value)
        out['secrets'] = {alias: name for alias, (name, _) in self.secrets.items()}
        return out


def _plain(value):
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, '__dataclass_fields__'):
        d = {}
        for k in value.__dataclass_fields__:
            v = getattr(value, k)
            if k == 'source_context':
                d['project'] = v.project
                d['branch'] = v.branch
                d['trusted'] = v.trusted
                d['connection'] = v.connection
                continue
            d[k] = _plain(v)
        return d
    return yamlutil.unwrap(value)


def _combine(attr: str, old, new):
    kind = ATTRIBUTE_SEMANTICS.get(attr)
    if kind == STICKY_TRUE:
        # Not even ``!override`` may turn it off again.
        return bool(old) or bool(yamlutil.unwrap(new))
    if kind == INTERSECT:
        # Nor may it drop a constraint an earlier variant or parent set.
        return tuple(old or ()) + (tuple(yamlutil.unwrap(new) or ()),)
    if isinstance(new, yamlutil.Override):
        return copy.copy(new.value)
    new = yamlutil.unwrap(new)
    if old is None:
        return new
    if kind == MERGE:
        return deep_merge(old, new or {})
    if kind == ACCUMULATE:
        return tuple(old) + tuple(x for x in new if x not in old)
    if kind == PREPEND:
        return tuple(new) + tuple(x for x in old if x not in new)
    if kind == UNION:
        return tuple(old) + tuple(x for x in new if x not in old)
    return new


@dataclass
class _Level:
    """One job of the chain being walked: its matching variants and how
    many of them are applied."""

    name: str
    variants: list[Job]
    index: int = 0

    @property
    def reference(self) -> Job:
        # The variant whose parent the variants without one use.
        return next((v for v in self.variants if v.parent_set), self.variants[0])


class JobFreezer:
    """Freezes jobs against one layout for one item (branch and files).

    ``project``: the item's project. With it, ``match-on-config-updates``
    acts: a job whose configuration (the file of any variant applied),
    playbooks or include-vars files the item changes runs whatever its
    file matchers say, unless the frozen job sets it false."""

    def __init__(self, layout, branch: str | None, files: list[str] | None = None,
                 default_parent: str = 'base', project: str | None = None):
        self.layout = layout
        self.branch = branch
        self.files = files
        self.default_parent = default_parent
        self.project = project
        # Jobs that matched the branch but not the item's files.
        self.files_missed: set[str] = set()

    def variants_of(self, name: str) -> list[Job]:
        return list(self.layout.jobs.get(name, ()))

    def matching(self, name: str) -> list[Job]:
        """The variants of ``name`` that apply: chosen by branch only.
        ``files``/``irrelevant-files`` are attributes of the job being
        built (inherited, the later variant's replacing the earlier's),
        matched once it is frozen (``_matches_files``), as released Zuul
        does."""
        return [v for v in self.variants_of(name) if v.matches_branch(self.branch)]

    def freeze(self, name: str, project_variants=()) -> FrozenJob | None:
        """The frozen job, or None if no variant of ``name`` matches this
        item (the job does not run). Raises FreezeError."""
        if name not in self.layout.jobs:
            raise FreezeError(f'Job "{name}" not defined')
        if self.files is not None and self.project is not None:
            updated = self._freeze_updating_config(name, project_variants)
            if updated is not None:
                return updated
        return self._freeze(name, project_variants)

    def _freeze_updating_config(self, name: str, project_variants) -> FrozenJob | None:
        """The job frozen with file matchers ignored, if the item changes
        its configuration and ``match-on-config-updates`` is on; else None."""
        files, self.files = self.files, None
        try:
            loose = self._freeze(name, project_variants)
        except FreezeError:
            return None     # the strict freeze reports what is wrong
        finally:
            self.files = files
        if loose is None or loose.get('match_on_config_updates', True) is False:
            return None
        return loose if self._changes_config_of(loose) else None

    def _changes_config_of(self, frozen: FrozenJob) -> bool:
        """Whether the item's files include a file defining one of the
        variants applied, a playbook of the job or an include-vars file
        (only files of the item's own project count)."""
        changed = set(self.files or ())
        paths = set()
        for variant in frozen.variants:
            if variant.source_context.project == self.project:
                paths.add(variant.source_context.path)
        for phase in PLAYBOOK_PHASES:
            for ref in frozen.playbooks(phase):
                if getattr(ref, 'source_context', None) is not None and \
                        ref.source_context.project == self.project:
                    paths.add(ref.path)
        for entry in frozen.get('include_vars') or ():
            paths.update(self._include_vars_paths(frozen, entry))
        return bool(changed & paths)

    def _include_vars_paths(self, frozen: FrozenJob, entry) -> list[str]:
        if isinstance(entry, str):
            owner = frozen.source_context.project if frozen.source_context else None
            return [entry] if owner == self.project else []
        if not isinstance(entry, dict) or not entry.get('name'):
            return []
        if entry.get('zuul-project'):
            return [entry['name']]
        owner = entry.get('project') or (frozen.source_context.project
                                         if frozen.source_context else None)
        short = self.project.split('/', 1)[-1]
        return [entry['name']] if owner in (self.project, short) else []

    def _freeze(self, name: str, project_variants) -> FrozenJob | None:
        top = self.matching(name)
        pp = [v for v in project_variants if v.matches_branch(self.branch)]
        if not top or (project_variants and not pp):
            return None
        frozen = FrozenJob(name=name, source_context=top[0].source_context)
        self._apply_job(frozen, name, top)
        for variant in pp:
            self._apply_variant(frozen, variant)
        if any(v.abstract for v in top):
            raise FreezeError(f'Job "{name}" is abstract and may not be run directly')
        if not self._matches_files(frozen):
            self.files_missed.add(name)
            return None
        return frozen

    def _matches_files(self, frozen: FrozenJob) -> bool:
        """The frozen job's ``files`` and ``irrelevant-files`` (each the
        one of the last variant applied that sets it: a child without its
        own inherits its parent's) against the item's files."""
        if self.files is None:
            return True
        matcher = Job(name=frozen.name, source_context=frozen.source_context)
        for variant in frozen.variants:
            if variant.file_matchers:
                matcher.file_matchers = variant.file_matchers
            if variant.irrelevant_file_matchers:
                matcher.irrelevant_file_matchers = variant.irrelevant_file_matchers
        return matcher.matches_files(self.files)

    def _parent_of(self, name: str, variant: Job, reference: Job) -> str | None:
        if variant.parent_set:
            return variant.parent
        if reference is not variant and reference.parent_set:
            return reference.parent
        if name == self.default_parent:
            return None
        return self.default_parent

    def _apply_job(self, frozen: FrozenJob, name: str, variants: list[Job]) -> None:
        """Apply ``name``'s variants, each after its parent's (depth
        first), with an explicit stack: no Python recursion, and at most
        MAX_INHERITANCE_DEPTH levels."""
        applied: set[str] = set()
        stack = [_Level(name, variants)]
        while stack:
            level = stack[-1]
            if level.index == len(level.variants):
                stack.pop()
                applied.add(level.name)
                continue
            variant = level.variants[level.index]
            parent = self._parent_of(level.name, variant, level.reference)
            if parent is not None and parent not in applied:
                parent_variants = self._parent_variants(level, variant, parent)
                if parent_variants:
                    self._check_chain(stack, frozen.name, parent)
                    stack.append(_Level(parent, parent_variants))
                    continue    # this variant is applied once the parent is
                applied.add(parent)
            self._apply_variant(frozen, variant)
            level.index += 1

    def _parent_variants(self, level: _Level, variant: Job, parent: str) -> list[Job]:
        if parent not in self.layout.jobs:
            raise FreezeError(f'Job "{level.name}" ({variant.location}) has an unknown '
                              f'parent "{parent}"')
        parent_variants = self.matching(parent)
        if parent_variants:
            self._check_protected(parent_variants, variant)
            if any(p.intermediate for p in parent_variants) and \
                    not any(v.abstract for v in level.variants):
                raise FreezeError(f'Job "{level.name}" must be abstract to inherit from '
                                  f'the intermediate job "{parent}"')
        return parent_variants

    @staticmethod
    def _check_chain(stack: list, name: str, parent: str) -> None:
        names = [level.name for level in stack]
        if parent in names:
            chain = ' -> '.join(names[names.index(parent):] + [parent])
            raise FreezeError(f'Inheritance cycle: {chain}')
        if len(stack) >= MAX_INHERITANCE_DEPTH:
            raise FreezeError(f'Inheritance depth of job "{name}" exceeds '
                              f'{MAX_INHERITANCE_DEPTH} (reached at its ancestor '
                              f'"{names[-1]}", whose parent is "{parent}")')

    def _check_protected(self, parent_variants: list[Job], child: Job) -> None:
        for pv in parent_variants:
            if pv.protected and pv.source_context.project != child.source_context.project:
                raise FreezeError(f'Job "{child.name}" may not inherit from the protected '
                                  f'job "{pv.name}" of project {pv.source_context.project}')

    def _apply_variant(self, frozen: FrozenJob, variant: Job) -> None:
        final_attrs = frozen.final_from
        if final_attrs and (variant.attributes or variant.secrets):
            allowed = {'files', 'irrelevant_files'}
            if variant.project_pipeline:
                # Where a project runs a final job places it in the job
                # graph; it does not change how the job runs (OpenStack's
                # project-config orders final release jobs this way).
                allowed.add('dependencies')
            changed = sorted(set(variant.attributes) - allowed)
            if changed:
                raise FreezeError(f'Unable to modify final job "{frozen.name}" attribute '
                                  f'"{changed[0]}" in {variant.describe()} (final since '
                                  f'{final_attrs})')
        passed = tuple(use for use in variant.secrets if use.pass_to_parent)
        if passed:
            _pass_to_parents(frozen, variant.name, passed)
        for attr, value in variant.attributes.items():
            frozen.attributes[attr] = _combine(attr, frozen.attributes.get(attr), value)
        for use in variant.secrets:
            frozen.secrets[use.alias] = (use.name, variant.source_context.project)
        if variant.secrets:
            # Secrets make a job post-review, even if this very variant
            # says ``post-review: false``.
            frozen.attributes['post_review'] = True
        if variant.final:
            frozen.final_from = variant.location
        kind = 'project-pipeline variant' if variant.project_pipeline else 'variant'
        frozen.inheritance_path.append(f'{kind} job {variant.name}@{variant.location}')
        frozen.variants.append(variant)


def _pass_to_parents(frozen: FrozenJob, job_name: str, uses: tuple) -> None:
    """Give ``uses`` (``pass-to-parent`` secrets of a variant of
    ``job_name``) to every playbook frozen so far that came from another
    job. The walk applies a job's variants only after all of its parents'
    (and never a child's before), so those are its parent jobs' playbooks;
    earlier variants of the job itself keep their own secrets only. A
    playbook that already has a secret of the same variable name keeps
    it, and does not get the passed one."""
    own = {id(ref) for variant in frozen.variants if variant.name == job_name
           for phase in PLAYBOOK_PHASES
           for ref in yamlutil.unwrap(variant.get(phase)) or ()}
    for phase in PLAYBOOK_PHASES:
        refs = frozen.attributes.get(phase)
        if refs:
            frozen.attributes[phase] = tuple(
                ref if id(ref) in own else _with_secrets(ref, uses) for ref in refs)


def _with_secrets(ref, uses: tuple):
    taken = {use.alias for use in ref.secrets}
    added = tuple(use for use in uses if use.alias not in taken)
    return dataclasses.replace(ref, secrets=tuple(ref.secrets) + added) if added else ref


def freeze_job(layout, name: str, branch: str | None, files=None, project_variants=(),
               default_parent: str = 'base') -> FrozenJob | None:
    return JobFreezer(layout, branch, files, default_parent).freeze(name, project_variants)


def validate_layout_jobs(layout, default_parent: str = 'base') -> list[ConfigError]:
    """Static checks once a layout is loaded: unknown parents, nodesets,
    secrets (and secrets from another project), semaphores."""
    errors: list[ConfigError] = []
    nodesets = getattr(layout, 'nodesets', {}) or {}
    secrets = getattr(layout, 'secrets', {}) or {}
    semaphores = getattr(layout, 'semaphores', None)
    for name, variants in layout.jobs.items():
        for v in variants:
            for reason in _variant_problems(layout, v, nodesets, secrets, semaphores):
                errors.append(ConfigError(reason, path=v.source_context.path,
                                          line=v.start_line, object_type='job',
                                          object_name=name, project=v.source_context.project,
                                          branch=v.source_context.branch))
    errors.extend(_depth_errors(layout, default_parent))
    return errors


def _static_parents(name: str, variants, default_parent: str) -> set[str]:
    """Every parent any variant of ``name`` may have (freezing picks
    among these by branch and files)."""
    explicit = {v.parent for v in variants if v.parent_set}
    if explicit:
        return {p for p in explicit if p is not None}
    return set() if name == default_parent else {default_parent}


def _static_depths(layout, default_parent: str) -> dict[str, int]:
    """The longest chain (in jobs) from each job up to a base job, over
    all variants; iterative, and cycles (a freeze error) are not followed."""
    parents = {name: _static_parents(name, variants, default_parent) & set(layout.jobs)
               for name, variants in layout.jobs.items()}
    depth: dict[str, int] = {}
    for start in parents:
        stack, active = [start], {start}
        while stack:
            name = stack[-1]
            pending = [p for p in parents[name] if p not in depth and p not in active]
            if pending:
                stack.append(pending[0])
                active.add(pending[0])
                continue
            depth[name] = 1 + max((depth.get(p, 0) for p in parents[name]), default=0)
            stack.pop()
            active.discard(name)
    return depth


def _depth_errors(layout, default_parent: str) -> list[ConfigError]:
    """One error per job where a chain first becomes longer than
    MAX_INHERITANCE_DEPTH (freezing refuses every job beyond it)."""
    errors = []
    for name, depth in _static_depths(layout, default_parent).items():
        if depth != MAX_INHERITANCE_DEPTH + 1:
            continue
        v = layout.jobs[name][0]
        sc = v.source_context
        errors.append(ConfigError(
            f'inheritance depth of job "{name}" exceeds {MAX_INHERITANCE_DEPTH} (the '
            'chain of parents up to its base job is too long)', path=sc.path,
            line=v.start_line, object_type='job', object_name=name, project=sc.project,
            branch=sc.branch))
    return errors


def _variant_problems(layout, v: Job, nodesets, secrets, semaphores):
    if v.parent_set and v.parent is not None and v.parent not in layout.jobs:
        yield f'unknown parent job "{v.parent}"'
    if v.parent_set and v.parent is None and not v.source_context.trusted and \
            v.source_context.project:
        yield 'only jobs in config projects may have no parent (base jobs)'
    nodeset = v.attributes.get('nodeset')
    if isinstance(nodeset, str) and nodeset not in nodesets:
        yield f'unknown nodeset "{nodeset}"'
    for use in v.secrets:
        secret = secrets.get(use.name)
        if secret is None:
            yield f'unknown secret "{use.name}"'
            continue
        secret_project = getattr(getattr(secret, 'source_context', None), 'project', None)
        if secret_project and v.source_context.project and \
                secret_project != v.source_context.project:
            yield (f'secret "{use.name}" belongs to project {secret_project}; a job may only '
                   'use secrets defined in its own project')
    if semaphores is not None:
        for sem in v.attributes.get('semaphores') or ():
            if sem not in semaphores:
                yield f'unknown semaphore "{sem}"'


def _group_project_variants(job_list) -> dict[str, list[Job]]:
    by_name: dict[str, list[Job]] = {}
    for variant in job_list:
        by_name.setdefault(variant.name, []).append(variant)
    return by_name


def freeze_job_graph(layout, project_name: str, pipeline, branch: str | None,
                     files=None, default_parent: str = 'base', job_list=None,
                     debug: list | None = None):
    """Freeze every job the project runs in ``pipeline`` for an item on
    ``branch`` touching ``files``. Returns (JobGraph, errors): jobs that
    cannot be frozen are reported as errors naming the job."""
    from zuul.model.jobgraph import JobGraph, JobGraphError
    pipeline_name = getattr(pipeline, 'name', pipeline)
    if job_list is None:
        ppc = layout.get_project_pipeline_config(project_name, pipeline_name, branch)
        job_list = ppc.job_list if ppc is not None else []
    pipeline = _resolve_pipeline(layout, pipeline)
    freezer = JobFreezer(layout, branch, files, default_parent, project=project_name)
    graph = JobGraph()
    errors: list[str] = []
    for name, variants in _group_project_variants(job_list).items():
        try:
            frozen = freezer.freeze(name, variants)
            if frozen is None:
                if debug is not None and name in freezer.files_missed:
                    debug.append(f'Job {name} does not run: the files changed do not '
                                 'match its files/irrelevant-files')
                elif debug is not None:
                    debug.append(f'Job {name} does not run: no variant matches branch '
                                 f'{branch}')
                continue
            _check_run_rules(frozen, project_name, pipeline, branch)
            resolve_nodeset_alternatives(layout, frozen)
            graph.add_job(frozen, frozen.dependencies)
            if debug is not None:
                debug.append(f'Job {name} runs, frozen from: '
                             + '; '.join(frozen.inheritance_path))
        except ConfigurationError as e:
            errors.append(f'{name}: {e.reason}' if not e.reason.startswith(
                ('Job', 'Unable', 'Inheritance', 'Project')) else e.reason)
    try:
        graph.order = graph.resolve()
    except JobGraphError as e:
        errors.append(e.reason)
        graph.order = []
    return graph, errors


# How deep ``alternatives`` may nest, and how many nodesets they may name
# in all (untrusted config must not make freezing arbitrarily slow).
MAX_ALTERNATIVES_DEPTH = 10
MAX_ALTERNATIVES = 50


def resolve_nodeset_alternatives(layout, frozen: FrozenJob) -> None:
    """A nodeset with ``alternatives`` becomes the first nodeset of the
    flattened list (in order, each alternative's own alternatives in its
    place), the rest go to ``frozen.nodeset_alternatives``: requested in
    turn when a node request fails. Raises FreezeError for an unknown
    name, a cycle or too many."""
    value = frozen.get('nodeset')
    if value is None:
        return
    leaves: list = []
    _flatten_alternatives(layout, value, leaves, [], frozen.name)
    if not leaves:
        raise FreezeError(f'Job "{frozen.name}": its nodeset has no alternatives to request')
    if leaves[0] is not value:
        frozen.attributes['nodeset'] = leaves[0]
    frozen.nodeset_alternatives = leaves[1:]


def _flatten_alternatives(layout, value, leaves: list, path: list, job: str) -> None:
    nodesets = getattr(layout, 'nodesets', None) or {}
    if isinstance(value, str):
        if value in path:
            raise FreezeError(f'Job "{job}": nodeset alternatives form a cycle: '
                              + ' -> '.join(path[path.index(value):] + [value]))
        nodeset = nodesets.get(value)
        if nodeset is None:
            raise FreezeError(f'Job "{job}" uses the unknown nodeset "{value}"')
        alternatives = list(getattr(nodeset, 'alternatives', None) or ())
    elif isinstance(value, dict):
        alternatives = list(value.get('alternatives') or ())
    else:
        alternatives = []
    if not alternatives:
        if len(leaves) >= MAX_ALTERNATIVES:
            raise FreezeError(f'Job "{job}": more than {MAX_ALTERNATIVES} nodeset '
                              'alternatives')
        leaves.append(value)
        return
    if len(path) >= MAX_ALTERNATIVES_DEPTH:
        raise FreezeError(f'Job "{job}": nodeset alternatives nest deeper than '
                          f'{MAX_ALTERNATIVES_DEPTH}')
    here = path + [value if isinstance(value, str) else '(inline nodeset)']
    for alternative in alternatives:
        _flatten_alternatives(layout, alternative, leaves, here, job)


def allowed_projects_match(constraints, project_name: str) -> bool:
    """Whether every ``allowed-projects`` list of the frozen job (one per
    variant or parent that set it) names the project, short or canonical."""
    names = {project_name, project_name.split('/', 1)[-1]}
    return all(names & set(allowed) for allowed in constraints or ())


def allowed_branches_match(constraints, branch: str | None) -> bool:
    """Whether ``branch`` matches every ``allowed-branches`` list (RE2,
    anchored at the start as branch matchers are); a ref without a branch
    (a tag) matches none."""
    for patterns in constraints or ():
        if branch is None or not any(re2.match(str(p), branch) for p in patterns):
            return False
    return True


def _check_run_rules(frozen: FrozenJob, project_name: str, pipeline,
                     branch: str | None = None) -> None:
    if not allowed_projects_match(frozen.get('allowed_projects'), project_name):
        # Released Zuul's wording, which people and tools match on.
        raise FreezeError(f'Project {project_name} is not allowed to run job '
                          f'{frozen.name}.')
    if not allowed_branches_match(frozen.get('allowed_branches'), branch):
        raise FreezeError(f'Job "{frozen.name}" is not allowed to run on branch '
                          f'{branch or "(none)"} of {project_name}')
    # Fail closed: a pipeline we cannot see is neither post-review nor
    # allowed to have secrets.
    pipeline_name = getattr(pipeline, 'name', pipeline)
    if frozen.post_review and not getattr(pipeline, 'post_review', False):
        what = 'has secrets' if frozen.uses_secrets else 'is post-review'
        raise FreezeError(f'Pre-review pipeline {pipeline_name} does not allow post-review '
                          f'job "{frozen.name}" (the job {what})')
    if frozen.uses_secrets and not getattr(pipeline, 'allow_secrets', False):
        raise FreezeError(f'Pipeline {pipeline_name} does not allow jobs with secrets '
                          f'("{frozen.name}")')


def _resolve_pipeline(layout, pipeline):
    if isinstance(pipeline, str):
        found = (getattr(layout, 'pipelines', None) or {}).get(pipeline)
        return found if found is not None else pipeline
    return pipeline
