"""Start-up: `kuberay render small.yaml` as a fresh process, beside `python -c pass`.

Hooks, the KRM function and the Argo CD plugin start the CLI once per call, so its
start-up is what users wait for. Each command runs `RUNS` times, interleaved so that
both see the same machine load; the figures are medians of wall time. Printed: both
medians, the render-only figure `kuberay import + render` minus the interpreter, and
the ratio render / bare interpreter. Target: the render median at most 0.15 s on an
idle 2-core machine. Both run with bytecode caching on (into a temporary
`PYTHONPYCACHEPREFIX`, so the checkout stays clean), as an installed package runs: a shell
that sets `PYTHONDONTWRITEBYTECODE` would otherwise make every start compile the sources.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 15

SMALL = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: small
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.46.0
"""


def _kuberay() -> list[str]:
    script = Path(sys.executable).with_name("kuberay")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from renderer.launch import main; main()"]


def _wall(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def measure(runs: int = RUNS) -> tuple[tuple[float, float], tuple[float, float]]:
    """Median (wall, CPU) seconds of `python -c pass` and of `kuberay render small.yaml`."""
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "small.yaml"
        small.write_text(SMALL, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        bare_cmd = [sys.executable, "-c", "pass"]
        render_cmd = [*_kuberay(), "render", str(small)]
        for cmd in (bare_cmd, render_cmd):
            _wall(cmd, env)  # warm the file cache and write the bytecode
        bare: list[tuple[float, float]] = []
        render: list[tuple[float, float]] = []
        for _ in range(runs):
            bare.append(_wall(bare_cmd, env))
            render.append(_wall(render_cmd, env))
    return _medians(bare), _medians(render)


def _medians(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def main() -> None:
    (bare, bare_cpu), (render, render_cpu) = measure()
    # CPU time is the steadier figure on a shared machine: waiting for a core is not in it.
    print(
        f"startup: python -c pass {bare * 1000:.0f} ms, kuberay render small.yaml "
        f"{render * 1000:.0f} ms (medians of {RUNS}); kuberay's own share "
        f"{(render - bare) * 1000:.0f} ms; ratio render / python {render / bare:.1f}; "
        f"CPU {bare_cpu * 1000:.0f} ms vs {render_cpu * 1000:.0f} ms, ratio "
        f"{render_cpu / bare_cpu:.1f}"
    )


if __name__ == "__main__":
    main()
