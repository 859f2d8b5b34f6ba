"""Reading examples out of the documentation, so tests load them as printed."""

from __future__ import annotations

import pathlib
import re
import textwrap

TOP = pathlib.Path(__file__).resolve().parents[2]


def code_blocks(page: str, language: str) -> list[str]:
    """The bodies of every ``.. code-block:: <language>`` of ``page``
    (a path under the repository root), dedented, in page order."""
    lines = (TOP / page).read_text(encoding='utf-8').splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if not re.match(rf'^\s*\.\. code-block::\s*{language}\s*$', line):
            continue
        body = []
        for following in lines[i + 1:]:
            if following.strip() and not following[:1].isspace():
                break
            body.append(following)
        blocks.append(textwrap.dedent('\n'.join(body)).strip() + '\n')
    return blocks
