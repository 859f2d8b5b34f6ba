"""How the ``nodepool`` command prints: boxed tables, ages, JSON (shared by
its node and image verbs)."""

from __future__ import annotations

import json
import time


def render_table(headers: list[str], rows: list[list]) -> str:
    """A boxed text table, as released Nodepool prints (prettytable style)."""
    cells = [[('' if c is None else str(c)) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    rule = '+' + '+'.join('-' * (w + 2) for w in widths) + '+'

    def line(values):
        return '| ' + ' | '.join(v.ljust(w) for v, w in zip(values, widths)) + ' |'
    out = [rule, line(headers), rule]
    out += [line(r) for r in cells]
    out.append(rule)
    return '\n'.join(out)


def age(since: float | None, now: float | None = None) -> str:
    """dd:hh:mm:ss since a timestamp."""
    if not since:
        return ''
    seconds = max(0, int((now or time.time()) - since))
    d, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f'{d:02d}:{h:02d}:{m:02d}:{s:02d}'


def print_json(objs: list[dict]) -> None:
    print(json.dumps(objs, indent=2))
