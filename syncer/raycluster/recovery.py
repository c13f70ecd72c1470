"""Which dead rendered Pod the syncer deletes so that GitOps self-heal re-creates it.

KubeRay's `shouldDeletePod` (raycluster_controller.go): a Pod in phase `Failed` or
`Succeeded` (an evicted Pod is `Failed` with reason `Evicted`), or `Running` while its Ray
container (the first container, matched by name in `containerStatuses`) has terminated
under `restartPolicy: Never`; with `Always` or `OnFailure` the kubelet restarts the
container, so the Pod is kept. Two exceptions are the syncer's own: a Pod it shut down
itself (annotation `kuberay.io/shutdown-requested`, set when a RayJob finished) and any
Pod of a finished RayJob stay, since re-creating them would restart released compute.
Pure: reads one Pod manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from renderer import naming

Manifest = dict[str, Any]

FAILED: Final = "Failed"
SUCCEEDED: Final = "Succeeded"
RUNNING: Final = "Running"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether to delete the Pod, and why (for the Event and the log)."""

    delete: bool
    reason: str


def _ray_container_terminated(pod: Manifest) -> Manifest | None:
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return None
    name = containers[0].get("name")
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            terminated = (status.get("state") or {}).get("terminated")
            return terminated if isinstance(terminated, dict) else None
    return None


def should_delete(pod: Manifest, *, job_finished: bool = False) -> Verdict:
    """KubeRay's `shouldDeletePod` for one rendered Pod, minus the syncer's own exceptions."""
    meta = pod.get("metadata") or {}
    name = meta.get("name") or "<unnamed>"
    if naming.SHUTDOWN_REQUESTED in (meta.get("annotations") or {}):
        return Verdict(False, f"pod {name} was shut down by the syncer")
    if job_finished:
        return Verdict(False, f"pod {name} belongs to a finished RayJob")
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase in (FAILED, SUCCEEDED):
        why = f" ({status['reason']})" if status.get("reason") else ""
        return Verdict(True, f"pod {name} is in phase {phase}{why}; it will not recover")
    terminated = _ray_container_terminated(pod)
    if phase == RUNNING and terminated is not None:
        policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        if policy == "Never":
            return Verdict(
                True,
                f"pod {name} is Running but its Ray container terminated "
                f"({terminated.get('reason') or 'no reason'}) under restartPolicy Never",
            )
        return Verdict(
            False,
            f"pod {name}'s Ray container terminated; restartPolicy {policy} restarts it",
        )
    return Verdict(False, f"pod {name} is in phase {phase or 'unknown'}")
