"""`python -m bench [name [options]] ...`: run the named benchmarks (all by default).

Arguments after a benchmark's name, up to the next name, are its own options
(`python -m bench syncer --jobs 100`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from bench import render, startup, syncer


def _autoscaling(args: Sequence[str]) -> None:
    # Imported when run: it loads Ray, the syncer and the fake API server.
    from bench import autoscaling

    autoscaling.main(args)


BENCHMARKS: dict[str, Callable[[Sequence[str]], object]] = {
    "render": lambda args: render.main(),
    "syncer": syncer.main,
    "startup": lambda args: startup.main(),
    "autoscaling": _autoscaling,
}


def _main(argv: list[str]) -> int:
    runs: list[tuple[str, list[str]]] = []
    for arg in argv:
        if arg in BENCHMARKS:
            runs.append((arg, []))
        elif runs:
            runs[-1][1].append(arg)
        else:
            print(f"unknown benchmark {arg!r}; known: {', '.join(BENCHMARKS)}")
            return 2
    for name, args in runs or [(name, []) for name in BENCHMARKS]:
        BENCHMARKS[name](args)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
