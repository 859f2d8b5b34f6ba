"""Links that came from a job: only http(s), or relative.

A job hands back URLs (``zuul_return``'s ``zuul.log_url`` and artifact
URLs) that zuul-web shows as links and reporters put in comments.  A
``javascript:`` or ``data:`` URL would run script in the web page of
whoever clicks it (an admin's token is in that page), so such links are
dropped when a result is taken in and again when one is served (rows
stored by earlier releases).  Browsers remove tabs and newlines from a
URL and ignore leading control characters and spaces before they look at
its scheme; the check does the same first, so ``java\\tscript:`` and
`` javascript:`` are caught too.
"""

from __future__ import annotations

import re

SAFE_SCHEMES = ('http', 'https')
# Artifacts may also name local files (image builds on a local provider
# return file:// URLs the launcher reads); kept as data, never a link.
ARTIFACT_SCHEMES = SAFE_SCHEMES + ('file',)

_SCHEME_RE = re.compile(r'^([A-Za-z][A-Za-z0-9+.\-]*):')
_STRIPPED = re.compile(r'[\t\n\r]')
_CONTROL = re.compile(r'[\x00-\x1f\x7f]')


def safe_link(url, schemes=SAFE_SCHEMES) -> str | None:
    """``url`` if a browser would open it as an http(s) or relative link
    (or a link of another of ``schemes``), else None."""
    if not isinstance(url, str) or not url:
        return None
    seen = _STRIPPED.sub('', url).lstrip('\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0c'
                                          '\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18'
                                          '\x19\x1a\x1b\x1c\x1d\x1e\x1f ')
    if _CONTROL.search(seen):
        return None
    match = _SCHEME_RE.match(seen)
    if match and match.group(1).lower() not in schemes:
        return None
    return url


def safe_result_data(data) -> dict:
    """A build's returned data as the scheduler takes it in: a
    ``zuul.log_url`` that is no web link dropped, artifacts whose ``url``
    is neither a web link nor a local file removed (file:// ones are
    Zuul's own data, served or shown as links never: see
    ``web_artifacts``)."""
    if not isinstance(data, dict):
        return {}
    zuul = data.get('zuul')
    if not isinstance(zuul, dict):
        return data
    zuul = dict(zuul)
    if 'log_url' in zuul and safe_link(zuul['log_url']) is None:
        del zuul['log_url']
    artifacts = zuul.get('artifacts')
    if isinstance(artifacts, list):
        zuul['artifacts'] = [a for a in artifacts if isinstance(a, dict) and
                             safe_link(a.get('url'), ARTIFACT_SCHEMES) is not None]
    return dict(data, zuul=zuul)


def web_artifacts(artifacts) -> list:
    """The artifacts a page may show as links: web or relative URLs only."""
    return [a for a in artifacts or () if isinstance(a, dict)
            and safe_link(a.get('url')) is not None]
