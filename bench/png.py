"""A scatter plot written as PNG with zlib alone (no plotting library is a dependency).

`scatter` draws series of (x, y) points on a white canvas with axes, ticks and digit
labels (a 3x5 pixel font, drawn 2x) and writes an 8-bit RGB PNG: signature, IHDR, one
IDAT of filtered rows, IEND, each chunk with its CRC.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

Color = tuple[int, int, int]
_FONT = {  # 3x5 glyphs, rows top to bottom, 3 bits each
    "0": (7, 5, 5, 5, 7),
    "1": (2, 6, 2, 2, 7),
    "2": (7, 1, 7, 4, 7),
    "3": (7, 1, 7, 1, 7),
    "4": (5, 5, 7, 1, 1),
    "5": (7, 4, 7, 1, 7),
    "6": (7, 4, 7, 5, 7),
    "7": (7, 1, 1, 1, 1),
    "8": (7, 5, 7, 5, 7),
    "9": (7, 5, 7, 1, 7),
    ".": (0, 0, 0, 0, 2),
    "-": (0, 0, 7, 0, 0),
    "s": (0, 7, 4, 1, 7),
}


class Canvas:
    """RGB pixels, white to start."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: int, y: int, color: Color, size: int = 1) -> None:
        for dy in range(size):
            for dx in range(size):
                px, py = x + dx, y + dy
                if 0 <= px < self.width and 0 <= py < self.height:
                    at = (py * self.width + px) * 3
                    self.pixels[at : at + 3] = bytes(color)

    def line(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for step in range(steps + 1):
            self.dot(x0 + (x1 - x0) * step // steps, y0 + (y1 - y0) * step // steps, color)

    def text(self, x: int, y: int, text: str, color: Color, scale: int = 2) -> None:
        for index, char in enumerate(text):
            for row, bits in enumerate(_FONT.get(char, (0, 0, 0, 0, 0))):
                for col in range(3):
                    if bits & (4 >> col):
                        self.dot(x + (index * 4 + col) * scale, y + row * scale, color, scale)

    def png(self) -> bytes:
        rows = b"".join(
            b"\x00" + bytes(self.pixels[y * self.width * 3 : (y + 1) * self.width * 3])
            for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows, 9))
            + chunk(b"IEND", b"")
        )


def _ticks(top: float, count: int = 5) -> list[float]:
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [step * i for i in range(int(top / step) + 1)]


def _label(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def scatter(
    path: Path,
    series: Sequence[tuple[Sequence[tuple[float, float]], Color]],
    *,
    width: int = 900,
    height: int = 500,
) -> Path:
    """Plot each series (points, colour) over its x range and from 0 to the largest y."""
    canvas = Canvas(width, height)
    left, right, top, bottom = 60, 20, 20, 40
    xs = [x for points, _ in series for x, _ in points]
    ys = [y for points, _ in series for _, y in points if math.isfinite(y)]
    x_min = math.floor(min(xs, default=0.0))
    x_span = (max(xs, default=1.0) - x_min) or 1.0
    y_max = max(ys, default=1.0) or 1.0
    plot_w, plot_h = width - left - right, height - top - bottom
    grey, black = (200, 200, 200), (0, 0, 0)

    def at(x: float, y: float) -> tuple[int, int]:
        return (
            left + round((x - x_min) / x_span * plot_w),
            top + plot_h - round(min(y, y_max) / y_max * plot_h),
        )

    for tick in _ticks(y_max):
        _, py = at(x_min, tick)
        canvas.line(left, py, left + plot_w, py, grey)
        canvas.text(4, py - 5, _label(tick), black)
    for tick in _ticks(x_span):
        px, _ = at(x_min + tick, 0)
        canvas.line(px, top + plot_h, px, top + plot_h + 5, black)
        canvas.text(px - 8, top + plot_h + 10, _label(x_min + tick) + "s", black)
    canvas.line(left, top, left, top + plot_h, black)
    canvas.line(left, top + plot_h, left + plot_w, top + plot_h, black)
    for points, color in series:
        for x, y in points:
            if math.isfinite(y):
                px, py = at(x, y)
                canvas.dot(px - 1, py - 1, color, 3)
    path.write_bytes(canvas.png())
    return path
