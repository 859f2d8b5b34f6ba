"""A development code-review server that speaks the Gerrit protocol.

NOT a Gerrit: a small in-process stand-in for tests and the quickstart. It
serves, over real SSH (paramiko), ``gerrit stream-events``, ``gerrit query
--format JSON``, ``gerrit review``, ``gerrit version`` and git
(``git-upload-pack`` / ``git-receive-pack``) from real bare repositories,
with event and query JSON in the shape Gerrit 3.x produces (checked against
the captured streams in the shared corpus), so the production Gerrit
driver runs against it unmodified. Optionally (``http_port``) it also
serves read-only HTTP pages of the changes at the address change links
point to (``/c/<project>/+/<number>``; see web.py).

Developers use it as they would Gerrit: ``git clone`` over SSH, ``scp``
the ``hooks/commit-msg`` hook (it adds the ``Change-Id`` footer), and
``git push origin HEAD:refs/for/<branch>`` to upload a change or a new
patch set of it (see receive.py); branches move only by submit.
"""

from zuul.devtools.gerrit.server import DevGerritServer
from zuul.devtools.gerrit.store import ReviewStore

__all__ = ['DevGerritServer', 'ReviewStore']
