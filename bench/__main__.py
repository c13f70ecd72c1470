"""`python -m bench [names]`: run the named benchmarks (all by default)."""

from __future__ import annotations

import sys

from bench import render

BENCHMARKS = {"render": render.main}


def _main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    for name in names:
        if name not in BENCHMARKS:
            print(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
            return 2
        BENCHMARKS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
