"""``- pragma:`` stanzas: settings for the file they are in."""

from __future__ import annotations

from dataclasses import dataclass

import voluptuous as vs

from zuul.configloader.schema import as_list, scalar_or_list, validate

PRAGMA_SCHEMA = vs.Schema({
    'implicit-branch-matcher': bool,
    'implied-branches': scalar_or_list(str),
})


@dataclass
class Pragma:
    """``implicit_branch_matcher`` is None when the file does not say;
    ``implied_branches`` (regexes) replace the implicit matcher for jobs and
    project-pipelines without explicit branches."""

    implicit_branch_matcher: bool | None = None
    implied_branches: tuple = ()


class PragmaParser:
    def parse(self, conf, pragma: Pragma | None = None) -> Pragma:
        """Parse one stanza into ``pragma`` (several stanzas in one file
        combine)."""
        validate(PRAGMA_SCHEMA, dict(conf))
        pragma = pragma or Pragma()
        if 'implicit-branch-matcher' in conf:
            pragma.implicit_branch_matcher = conf['implicit-branch-matcher']
        if 'implied-branches' in conf:
            pragma.implied_branches = tuple(as_list(conf['implied-branches']))
        return pragma
