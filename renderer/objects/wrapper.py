"""The shutdown-aware `ray start` wrapper of RayJob cluster Pods, and the volume it reads.

Cluster Pods of a RayJob run `ray start` under a shell wrapper with `restartPolicy: Never`
(DESIGN §3): when the syncer sets the pod annotation `kuberay.io/shutdown-requested`, the
wrapper, which polls a downward API file of the pod's annotations, runs `ray stop` and
exits 0. Pure text and dict builders.
"""

from __future__ import annotations

from typing import Final

from renderer import naming, templating
from renderer.manifest import Manifest
from renderer.model.rayjob import group_templates

SHUTDOWN_POLL_SECONDS: Final = 2

# Runs `ray start --block` in the background; on the shutdown annotation it runs `ray stop`
# and exits 0, otherwise it exits with Ray's code. PID 1 ignores SIGTERM unless trapped, so
# the trap forwards it to Ray (a signal that lands before `$!` is known is remembered and
# forwarded just after); sleeping in the background keeps the trap prompt.
WRAPPER_TEMPLATE: Final = """\
ray_pid= ray_term=
trap 'ray_term=1; kill -TERM "$ray_pid" 2>/dev/null' TERM INT
{{ ray_start }} &
ray_pid=$!
[ -z "$ray_term" ] || kill -TERM "$ray_pid"
while kill -0 "$ray_pid" 2>/dev/null; do
  if grep -q '^{{ pattern }}=' "{{ file }}" 2>/dev/null; then
    echo "{{ annotation }} is set: stopping Ray"
    ray stop
    exit 0
  fi
  sleep {{ poll }} &
  wait $!
done
wait "$ray_pid"
"""


def wrap_ray_start(ray_start: str, *, annotations_file: str = "") -> str:
    """Shell text that runs `ray_start` and stops Ray when the pod asks for shutdown.

    `annotations_file` is the downward API file to poll (tests point it elsewhere).
    """
    return templating.render_string(
        WRAPPER_TEMPLATE,
        {
            "ray_start": ray_start,
            "pattern": naming.SHUTDOWN_REQUESTED.replace(".", "\\."),
            "file": annotations_file or f"{naming.PODINFO_DIR}/{naming.PODINFO_FILE}",
            "annotation": naming.SHUTDOWN_REQUESTED,
            "poll": SHUTDOWN_POLL_SECONDS,
        },
    ).rstrip("\n")


def _podinfo_volume() -> Manifest:
    return {
        "name": naming.PODINFO_VOLUME,
        "downwardAPI": {
            "items": [
                {"path": naming.PODINFO_FILE, "fieldRef": {"fieldPath": "metadata.annotations"}}
            ]
        },
    }


def _podinfo_mount() -> Manifest:
    return {"name": naming.PODINFO_VOLUME, "mountPath": naming.PODINFO_DIR, "readOnly": True}


def add_podinfo(cluster_spec: Manifest) -> None:
    """Give the Ray container of every group its annotations, read-only (in place)."""
    for _, group in group_templates(cluster_spec):
        pod = group["template"].setdefault("spec", {})
        pod.setdefault("volumes", []).append(_podinfo_volume())
        pod["containers"][0].setdefault("volumeMounts", []).append(_podinfo_mount())
