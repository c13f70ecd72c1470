"""KubeRay's shouldDeletePod cases (raycluster_controller.go) and the syncer's two exceptions."""

from __future__ import annotations

from typing import Any

import pytest

from syncer.raycluster.recovery import should_delete

Manifest = dict[str, Any]


def pod(
    phase: str,
    *,
    restart: str = "Never",
    ray_state: Manifest | None = None,
    other_state: Manifest | None = None,
    reason: str = "",
    annotations: dict[str, str] | None = None,
) -> Manifest:
    statuses = []
    if other_state is not None:
        statuses.append({"name": "sidecar", "state": other_state})
    if ray_state is not None:
        statuses.append({"name": "ray-worker", "state": ray_state})
    status: Manifest = {"phase": phase, "containerStatuses": statuses}
    if reason:
        status["reason"] = reason
    return {
        "metadata": {"name": "c-g-worker-x-0", "annotations": annotations or {}},
        "spec": {
            "restartPolicy": restart,
            "containers": [{"name": "ray-worker"}, {"name": "sidecar"}],
        },
        "status": status,
    }


TERMINATED = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
RUNNING = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        # Phase Failed or Succeeded: deleted whatever the restart policy.
        (pod("Failed", restart="Always"), True),
        (pod("Failed", restart="OnFailure"), True),
        (pod("Failed", restart="Never"), True),
        (pod("Succeeded", restart="Always"), True),
        (pod("Succeeded", restart="Never"), True),
        # An evicted pod is Failed with reason Evicted.
        (pod("Failed", reason="Evicted", restart="Always"), True),
        # Running with the Ray container terminated: only restartPolicy Never deletes.
        (pod("Running", restart="Never", ray_state=TERMINATED), True),
        (pod("Running", restart="Always", ray_state=TERMINATED), False),
        (pod("Running", restart="OnFailure", ray_state=TERMINATED), False),
        # Running with the Ray container running, or no status for it yet: kept.
        (pod("Running", restart="Never", ray_state=RUNNING), False),
        (pod("Running", restart="Never"), False),
        # Only the Ray container (the first one) counts, not a terminated sidecar.
        (pod("Running", restart="Never", ray_state=RUNNING, other_state=TERMINATED), False),
        # Pending and Unknown pods are kept, even with a terminated Ray container.
        (pod("Pending", restart="Never", ray_state=TERMINATED), False),
        (pod("Unknown", restart="Never"), False),
    ],
)
def test_kuberay_should_delete_pod(case: Manifest, expected: bool) -> None:
    assert should_delete(case).delete is expected


def test_the_reason_names_the_phase_and_the_eviction() -> None:
    verdict = should_delete(pod("Failed", reason="Evicted"))
    assert verdict.reason == "pod c-g-worker-x-0 is in phase Failed (Evicted); it will not recover"
    oom = should_delete(pod("Running", ray_state=TERMINATED))
    assert "OOMKilled" in oom.reason and "restartPolicy Never" in oom.reason


def test_a_pod_the_syncer_shut_down_is_never_deleted() -> None:
    stopped = pod("Succeeded", annotations={"kuberay.io/shutdown-requested": "2026-01-01"})
    verdict = should_delete(stopped)
    assert not verdict.delete
    assert "shut down by the syncer" in verdict.reason
    assert not should_delete(pod("Running", ray_state=TERMINATED), job_finished=True).delete


def test_a_pod_of_a_finished_rayjob_is_never_deleted() -> None:
    verdict = should_delete(pod("Failed", reason="Evicted"), job_finished=True)
    assert verdict == type(verdict)(False, "pod c-g-worker-x-0 belongs to a finished RayJob")
