"""A job's ``include-vars``: variables loaded from YAML files in repos.

Each entry is ``{name, project?, required?, use-ref?}``:

* ``name`` -- the file, relative to the root of the repository;
* ``project`` -- the project it is read from (short or canonical name);
  default: the project of the item under test.  It must be one of the
  job's projects (the items' and the required projects);
* ``required`` (default true) -- a missing file ends the build with an
  error; otherwise it is skipped;
* ``use-ref`` (default true) -- read the file from the speculative state
  checked out for the job (the changes under test included); false: from
  the branch as it is without them.

Files are read in order, later ones overriding earlier ones; the job's
own ``vars`` override them all.  A repository's content is untrusted:
the file is opened below the checkout without following symlinks, must
hold a mapping, may not set variables that choose how Ansible connects
or executes (zuul.lib.ansiblevars), and every string in it reaches
Ansible as unsafe text (never templated).
"""

from __future__ import annotations

from zuul.lib import safefile, yamlutil
from zuul.lib.ansiblevars import refused_for_untrusted

MAX_BYTES = 1024 * 1024
# Names Zuul gives itself; a file may no more set them than job vars may.
RESERVED = ('zuul', 'nodepool', 'unsafe_vars', 'zuul_return')


class IncludeVarsError(ValueError):
    """An include-vars file that is missing (and required) or unusable."""


def entry_options(entry) -> tuple[str, str | None, bool, bool]:
    """(name, project, required, use_ref) of an entry (a mapping or, as
    released Zuul also takes, a plain file name)."""
    if isinstance(entry, str):
        return entry, None, True, True
    if not isinstance(entry, dict) or not isinstance(entry.get('name'), str):
        raise IncludeVarsError(f'include-vars: an entry needs a file name, got {entry!r}')
    return (entry['name'], entry.get('project'), bool(entry.get('required', True)),
            bool(entry.get('use-ref', entry.get('use_ref', True))))


def find_project(checkouts: dict, hostnames: dict, wanted: str) -> tuple[str, str]:
    """The (connection, project) of ``checkouts`` named ``wanted``."""
    for connection, project in checkouts:
        canonical = f'{hostnames.get(connection, connection)}/{project}'
        if wanted in (project, canonical):
            return connection, project
    raise IncludeVarsError(f'include-vars: project {wanted} is not one of the job\'s '
                           'projects (list it in required-projects)')


def read_vars(root: str, name: str, project: str, required: bool) -> dict:
    """The mapping in ``root/name``; {} for a missing optional file."""
    try:
        rel = safefile.relative_to(root, name)
        with safefile.open_regular_file_beneath(root, rel, 'rb') as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        if required:
            raise IncludeVarsError(f'include-vars: required file {name} not found in '
                                   f'project {project}') from None
        return {}
    except OSError as exc:
        raise IncludeVarsError(f'include-vars: cannot read {name} of project {project}: '
                               f'{exc}') from None
    if len(data) > MAX_BYTES:
        raise IncludeVarsError(f'include-vars: {name} of project {project} is larger than '
                               f'{MAX_BYTES} bytes')
    try:
        value = yamlutil.load(data.decode('utf-8', 'replace'), path=name)
    except yamlutil.YAMLSyntaxError as exc:
        raise IncludeVarsError(f'include-vars: {name} of project {project}: {exc}') from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise IncludeVarsError(f'include-vars: {name} of project {project} does not hold '
                               'a mapping of variables')
    refused = refused_for_untrusted(value) + sorted(k for k in value if k in RESERVED)
    if refused:
        raise IncludeVarsError(f'include-vars: {name} of project {project} may not set '
                               f'{", ".join(refused)}')
    # A file in a repository is text to Ansible, never a template.
    return yamlutil.mark_unsafe(dict(value))


def load_include_vars(entries: list, default_project: tuple[str, str] | None,
                      checkouts: dict, hostnames: dict, checkout_root) -> dict:
    """All entries' variables merged in order.  ``checkout_root(connection,
    project, use_ref)`` is the directory holding that project's files."""
    merged: dict = {}
    for entry in entries:
        name, project, required, use_ref = entry_options(entry)
        if project is None:
            if default_project is None:
                raise IncludeVarsError('include-vars: no project under test to read '
                                       f'{name} from; name one')
            key = default_project
        else:
            key = find_project(checkouts, hostnames, str(project))
        root = checkout_root(key[0], key[1], use_ref)
        merged.update(read_vars(root, name, key[1], required))
    return merged

