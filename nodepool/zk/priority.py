"""The order in which launchers serve node requests.

Requests are served by pipeline precedence (the ``<priority>`` part of
the znode name, lower first), then by *relative priority* (lower first),
then first come first served (the znode's sequence number).

``relative_priority`` is a field of the request body that Zuul's
scheduler writes when ``[scheduler] relative_priority`` is on: 0 for the
first item of a pipeline queue (or, in independent pipelines, of a
project), 1 for the next, ... and rewrites while the request waits and
the items ahead of it leave.  Without it every request has 0, so the
order is precedence then submission, as before.  It travels in the
record's ``extra`` fields (the JSON keys ``NodeRequest`` does not model),
so every reader and writer of the record keeps it.
"""

from __future__ import annotations

from nodepool.zk.records import NodeRequest, request_sort_key

#: The JSON key of the request body.
RELATIVE_PRIORITY = 'relative_priority'


def relative_priority(request: NodeRequest) -> int:
    """The request's relative priority (0 when unset or unreadable)."""
    value = (request.extra or {}).get(RELATIVE_PRIORITY, 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def set_relative_priority(request: NodeRequest, value: int) -> None:
    request.extra = dict(request.extra or {})
    request.extra[RELATIVE_PRIORITY] = int(value)


def request_order(request: NodeRequest) -> tuple[int, int, int]:
    """Sort key: (precedence priority, relative priority, sequence)."""
    priority, sequence = request_sort_key(request.id or '')
    return priority, relative_priority(request), sequence
