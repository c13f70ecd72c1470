"""Packing JSON texts the syncer keeps many of in memory: fragments replaced by one byte.

Status records, intents and queued Events each repeat the same keys and words: a
`Codebook` replaces each of its fragments (at most 31, longest first) with a control byte,
which JSON text never holds raw. A text that holds one anyway is kept as it is (`pack`
returns the `str`), so what `unpack` gives back is always exactly what was packed.

Not zlib: zlib lets go of the GIL on every call, and among eight busy worker threads the
caller then waits up to the 5 ms switch interval to get it back (5-8 ms a call measured,
against 7-20 us alone), which halved the syncer's throughput when ten thousand jobs ended
together. `bytes.replace` keeps the GIL and takes microseconds. Packed texts live only in
this process's memory, so a codebook may change from one version to the next. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

_CODES_MAX: Final = 31  # \x01 .. \x1f


class Codebook:
    """Fragments and the bytes that stand for them."""

    def __init__(self, fragments: Sequence[bytes]) -> None:
        if len(fragments) > _CODES_MAX:
            raise ValueError(f"a codebook holds at most {_CODES_MAX} fragments")
        if any(min(fragment) < 0x20 for fragment in fragments):
            raise ValueError("a codebook fragment holds a control byte")
        self._codes = tuple((f, bytes([code])) for code, f in enumerate(fragments, start=1))

    def pack(self, text: str) -> bytes | str:
        """`text` with the fragments replaced; `text` itself if it has a control character."""
        if not text or min(text) < " ":
            return text
        packed = text.encode()
        for fragment, code in self._codes:
            packed = packed.replace(fragment, code)
        return packed

    def unpack(self, packed: bytes | str) -> str:
        """The text `pack` was given (UnicodeDecodeError for bytes it did not make)."""
        if isinstance(packed, str):
            return packed
        for fragment, code in reversed(self._codes):
            packed = packed.replace(code, fragment)
        return packed.decode()
