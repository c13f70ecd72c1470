"""Start-up: `kuberay render small.yaml` as a fresh process, beside `python -c pass`.

Hooks, the KRM function and the Argo CD plugin start the CLI once per call, so its
start-up is what users wait for. Each command runs `RUNS` times, interleaved so that
both see the same machine load; the figures are medians of wall time. Printed: both
medians, the render-only figure `kuberay import + render` minus the interpreter, and
the ratio render / bare interpreter. Target: the render median at most 0.15 s on an
idle 2-core machine.
"""

from __future__ import annotations

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
    return [sys.executable, "-c", "from renderer.cli import main; main()"]


def _wall(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(runs: int = RUNS) -> tuple[float, float]:
    """Median wall seconds of (`python -c pass`, `kuberay render small.yaml`)."""
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "small.yaml"
        small.write_text(SMALL, encoding="utf-8")
        bare_cmd = [sys.executable, "-c", "pass"]
        render_cmd = [*_kuberay(), "render", str(small)]
        _wall(render_cmd)  # warm the file cache and the bytecode
        bare: list[float] = []
        render: list[float] = []
        for _ in range(runs):
            bare.append(_wall(bare_cmd))
            render.append(_wall(render_cmd))
    return statistics.median(bare), statistics.median(render)


def main() -> None:
    bare, render = measure()
    print(
        f"startup: python -c pass {bare * 1000:.0f} ms, kuberay render small.yaml "
        f"{render * 1000:.0f} ms (medians of {RUNS}); kuberay's own share "
        f"{(render - bare) * 1000:.0f} ms; ratio render / python {render / bare:.1f}"
    )


if __name__ == "__main__":
    main()
