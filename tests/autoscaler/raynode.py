"""`ray start` for a worker node that stays on 127.0.0.1 (run by path, as the test kubelet does).

Ray keeps the loopback address as a node's IP only with `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`,
and the same switch makes `ray start` refuse to start a worker node ("Multi-node Ray
clusters are not supported"). In a Pod the node IP is the Pod IP; here every node's "Pod
IP" is 127.0.0.1, so this launcher runs Ray's own `ray start` with the switch at 0 in the
environment (every process it starts keeps loopback) and, in this process only, lets the
worker through that check and answers Ray's "which IP am I" with 127.0.0.1. Several nodes
share the IP on distinct ports (`--node-manager-port`, `--object-manager-port`, the agent,
runtime-env and metrics ports, and a `--min-worker-port`/`--max-worker-port` range each).
"""

from __future__ import annotations

import sys

LOOPBACK = "127.0.0.1"


def main(argv: list[str]) -> None:
    """Run `ray <argv>` (Ray's CLI) with the node IP pinned to 127.0.0.1."""
    import ray._private.ray_constants as ray_constants
    from ray._private import services
    from ray.scripts.scripts import main as ray_main

    # Ray's module attributes, read when `ray start` runs (and only in this process).
    setattr(ray_constants, "ENABLE_RAY_CLUSTER", True)  # noqa: B010
    setattr(services, "node_ip_address_from_perspective", lambda address=None: LOOPBACK)  # noqa: B010
    sys.argv = ["ray", *argv]
    ray_main()  # type: ignore[no-untyped-call]  # Ray's CLI entry point, untyped


if __name__ == "__main__":
    main(sys.argv[1:])
