"""Client-side files the development code-review server hands out, as
Gerrit serves ``hooks/commit-msg`` over scp."""

from __future__ import annotations

# Written for this server (not Gerrit's hook): the same contract, a
# "Change-Id: I<40 hex>" footer on every new commit message, kept by
# ``git commit --amend`` so that the next push updates the same change.
COMMIT_MSG_HOOK = r'''#!/bin/sh
# commit-msg hook from the development code-review server
# (zuul.devtools.gerrit). It adds a "Change-Id: I<40 hex>" footer to each
# new commit message. The server uses that footer to tell a new change from
# a new patch set of an existing one; "git commit --amend" keeps it.
#
# Install it in a clone:
#   scp -p -P <port> <user>@<host>:hooks/commit-msg "$(git rev-parse --git-dir)/hooks/"
# Turn it off in one repository:
#   git config gerrit.createChangeId false

msg="$1"

if test "$(git config --bool --get gerrit.createChangeId)" = false; then
    exit 0
fi

# The message as git will keep it: no comment lines, nothing below the
# "--verbose" scissors line.
content=$(sed -e '/^# -* >8 -*$/,$d' -e '/^#/d' -e '/^[[:space:]]*$/d' "$msg")

# An empty message aborts the commit: leave it empty.
test -n "$content" || exit 0

# It already has one (an amended commit).
if printf '%s\n' "$content" | grep -q '^Change-Id: I[0-9a-f]\{40\}[[:space:]]*$'; then
    exit 0
fi

# Derived from what is being committed, who commits it and when, and this
# process, so that two identical commits still get different ids.
id=$({
    git write-tree 2>/dev/null
    git rev-parse -q --verify HEAD 2>/dev/null
    git var GIT_AUTHOR_IDENT
    git var GIT_COMMITTER_IDENT
    echo "$$"
    printf '%s\n' "$content"
} | git hash-object --stdin) || exit 1

exec git interpret-trailers --in-place --if-exists doNothing \
    --trailer "Change-Id: I$id" "$msg"
'''

# Path (as scp names it, relative to the server's root) -> (mode, content).
FILES = {
    'hooks/commit-msg': (0o755, COMMIT_MSG_HOOK.encode()),
}


def lookup(path: str):
    """The served file at ``path`` ('hooks/commit-msg', '/hooks/commit-msg',
    '~/hooks/commit-msg'), or None."""
    name = path.strip()
    for prefix in ('~/', '/'):
        if name.startswith(prefix):
            name = name[len(prefix):]
    name = '/'.join(p for p in name.split('/') if p not in ('', '.'))
    return FILES.get(name)
