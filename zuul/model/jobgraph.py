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
        order: list[str] = []
        done: set[str] = set()
        for name in self.jobs:
            self._visit(name, order, done)
        return order

    def _visit(self, start: str, order: list, done: set) -> None:
        """Depth-first, dependencies first, with an explicit stack (a long
        chain of dependencies from untrusted config cannot exhaust
        Python's)."""
        if start in done:
            return
        path, on_path = [start], {start}
        pending = [iter(self.dependencies[start])]
        while pending:
            dep = next((d for d, _ in pending[-1] if d not in done), None)
            if dep is None:
                pending.pop()
                name = path.pop()
                on_path.discard(name)
                done.add(name)
                order.append(name)
                continue
            if dep in on_path:
                cycle = ' -> '.join(path[path.index(dep):] + [dep])
                raise JobGraphError(f'Dependency cycle: {cycle}')
            path.append(dep)
            on_path.add(dep)
            pending.append(iter(self.dependencies[dep]))

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
