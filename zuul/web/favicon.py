"""``/favicon.ico``: what every browser asks for on every page (the pages
themselves link /static/favicon.svg).  A 32x32 icon, drawn here as a PNG
inside an ICO container, so no binary file needs to live in the tree."""

from __future__ import annotations

import functools
import struct
import zlib

SIZE = 32
BACKGROUND = (0x1d, 0x2b, 0x3a, 255)
FOREGROUND = (255, 255, 255, 255)


def _is_mark(x: int, y: int) -> bool:
    """The white "Z" of /static/favicon.svg."""
    if 8 <= x < 24 and (8 <= y < 12 or 21 <= y < 25):
        return True
    # the diagonal, from the top bar's right end to the bottom bar's left
    return 12 <= y < 21 and abs((x - 8) - (24 - y) * 16 // 13) <= 2


def _png() -> bytes:
    rows = b''.join(
        b'\x00' + b''.join(bytes(FOREGROUND if _is_mark(x, y) else BACKGROUND)
                           for x in range(SIZE))
        for y in range(SIZE))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack('>I', len(data)) + kind + data
                + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff))
    header = struct.pack('>IIBBBBB', SIZE, SIZE, 8, 6, 0, 0, 0)   # 8-bit RGBA
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', header)
            + chunk(b'IDAT', zlib.compress(rows, 9)) + chunk(b'IEND', b''))


@functools.lru_cache(maxsize=1)
def favicon_ico() -> bytes:
    png = _png()
    directory = struct.pack('<HHH', 0, 1, 1)
    entry = struct.pack('<BBBBHHII', SIZE, SIZE, 0, 0, 1, 32, len(png), 6 + 16)
    return directory + entry + png
