"""``Depends-On:`` footers naming changes by URL, for sources whose
changes carry them in a description (GitLab's merge requests, GitHub's
pull requests): each URL is offered to every connection's ``change_for_url`` until one knows it."""

from __future__ import annotations

import logging
import re

log = logging.getLogger('zuul.driver.depends_on')

DEPENDS_ON = re.compile(r'^\s*Depends-On:\s*(\S+)\s*$', re.IGNORECASE | re.MULTILINE)


def depends_on_urls(text: str) -> list[str]:
    return DEPENDS_ON.findall(text or '')


def needed_by_url(change, text: str, connections) -> list:
    """The unmerged changes ``text``'s footers name, in their order; a
    URL no connection knows is logged and skipped."""
    needed = []
    for url in depends_on_urls(text):
        for connection in connections.all():
            resolver = getattr(connection, 'change_for_url', None)
            found = resolver(url) if resolver else None
            if found is not None:
                if not found.is_merged:
                    needed.append(found)
                break
        else:
            log.warning('%s: Depends-On %s names no known change', change.describe(), url)
    return needed
