"""The jobs of one item as a DAG of hard and soft dependencies."""

from __future__ import annotations

from zuul.model.errors import ConfigurationError


class JobGraphError(ConfigurationError):
    pass


class JobGraph:
    """Frozen jobs by name, in a dependency-respecting order.

    ``dependencies[name]`` is a list of (dependency name, soft). A hard
    dependency on a job that is not in the graph is an error; a soft one is
    dropped (the job it names is not running for this item).
    """

    def __init__(self):
        self.jobs: dict[str, object] = {}
        self.dependencies: dict[str, list[tuple[str, bool]]] = {}

    def add_job(self, job, dependencies=()) -> None:
        if job.name in self.jobs:
            raise JobGraphError(f'Job "{job.name}" appears twice in this project-pipeline')
        self.jobs[job.name] = job
        self.dependencies[job.name] = [(d.name, d.soft) for d in dependencies]

    def resolve(self) -> list[str]:
        """Drop soft dependencies on absent jobs, check hard ones and cycles;
        returns the names in topological order (stable: config order)."""
        for name, deps in self.dependencies.items():
            kept = []
            for dep, soft in deps:
                if dep not in self.jobs:
                    if soft:
                        continue
                    raise JobGraphError(f'Job "{name}" depends on "{dep}", which is not '
                                        'part of this project-pipeline')
                kept.append((dep, soft))
            self.dependencies[name] = kept
        order, state = [], {}

        def visit(name, path):
            if state.get(name) == 'done':
                return
            if state.get(name) == 'active':
                cycle = ' -> '.join(path[path.index(name):] + [name])
                raise JobGraphError(f'Dependency cycle: {cycle}')
            state[name] = 'active'
            for dep, _ in self.dependencies[name]:
                visit(dep, path + [name])
            state[name] = 'done'
            order.append(name)

        for name in self.jobs:
            visit(name, [])
        return order

    def hard_dependencies(self, name: str) -> tuple[str, ...]:
        return tuple(d for d, soft in self.dependencies[name] if not soft)

    def soft_dependencies(self, name: str) -> tuple[str, ...]:
        return tuple(d for d, soft in self.dependencies[name] if soft)

    def dependents_of(self, name: str) -> list[str]:
        """Every job that (transitively, through hard dependencies) needs
        ``name``: skipped when it fails."""
        out, frontier = [], [name]
        while frontier:
            current = frontier.pop()
            for job, deps in self.dependencies.items():
                if job not in out and any(d == current and not soft for d, soft in deps):
                    out.append(job)
                    frontier.append(job)
        return out
