"""A GitLab stand-in that runs as its own process
(``python -m tests.fakes.gitlab``) and speaks, at the process boundary,
what GitLab speaks: the REST API v4 (``/api/v4``, personal access tokens,
pagination, GitLab's error answers), git over smart HTTP
(``/<namespace>/<project>.git``, with ``refs/merge-requests/<iid>/head``),
and webhooks POSTed with GitLab's documented payloads and
``X-Gitlab-Token``. Real bare git repositories are behind it: merge
requests are merged, squashed, rebased and fast-forwarded with git.

It refuses what GitLab refuses: a wrong token (401), a project the user
is not a member of (404), merging a request that is closed, a draft, not
approved enough, conflicting or not rebased for a fast-forward project
(405/406), whose head moved (409), or by a user not allowed to merge into
a protected branch (401).

Modules: store.py (state and git), hooks.py (webhook payloads and their
delivery), api.py (REST routes), server.py (HTTP, git, the stand-in's own
``/-/standin/`` controls: request log, injected faults, deliveries),
process.py (start it as a process and drive it from tests).
"""
