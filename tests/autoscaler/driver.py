"""A Ray driver that takes its orders on stdin (run by path by the autoscaling e2e test).

One `ray.init` for the whole test module instead of one per scenario. Each stdin line is a
JSON order; each answer is one JSON line on stdout, `{"ok": ...}` or `{"error": "..."}`:
- `{"op": "tasks", "count": n, "hold": dir}`: n tasks of 1 CPU; each one that runs touches
  `<dir>/started-<id>` and holds its CPU until the test writes `<dir>/release` (every
  node is on this machine); the answer lists the Pod (RAY_CLOUD_INSTANCE_ID) each ran on;
- `{"op": "request", "cpus": n}`: `ray.autoscaler.sdk.request_resources(num_cpus=n)`;
- `{"op": "spread", "bundles": n}`: a STRICT_SPREAD placement group of n 1-CPU bundles,
  one task per bundle (the answer lists their Pods), then the group is removed.
Return values are small, so they are inlined and no object pins a worker node.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import ray
from ray.autoscaler.sdk import request_resources
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

HOLD_S = 300.0


@ray.remote(num_cpus=1)
def where(hold: str) -> str:
    """Hold a CPU until the file `<hold>/release` exists; the Pod this ran on."""
    if hold:
        (Path(hold) / f"started-{uuid.uuid4().hex}").touch()
        deadline = time.monotonic() + HOLD_S
        while not (Path(hold) / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return os.environ.get("RAY_CLOUD_INSTANCE_ID", "")


def tasks(count: int, hold: str) -> list[str]:
    return list(ray.get([where.remote(hold) for _ in range(count)]))


def spread(bundles: int) -> list[str]:
    group = placement_group([{"CPU": 1}] * bundles, strategy="STRICT_SPREAD")
    try:
        ray.get(group.ready())
        refs = [
            where.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=index
                )
            ).remote("")
            for index in range(bundles)
        ]
        return list(ray.get(refs))
    finally:
        remove_placement_group(group)


def answer(order: dict[str, Any]) -> Any:
    op = order.get("op")
    if op == "tasks":
        return tasks(int(order["count"]), str(order.get("hold") or ""))
    if op == "request":
        request_resources(num_cpus=int(order["cpus"]))
        return int(order["cpus"])
    if op == "spread":
        return spread(int(order["bundles"]))
    raise ValueError(f"unknown order {op!r}")


def say(reply: dict[str, Any]) -> None:
    """One answer line on stdout (the test reads it)."""
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


def main() -> None:
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    say({"ok": "ready"})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = {"ok": answer(json.loads(line))}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the test
            reply = {"error": f"{exc!r}\n{traceback.format_exc()}"}
        say(reply)


if __name__ == "__main__":
    main()
