"""The Redis GCS FT cleanup anchor: a ConfigMap holding KubeRay's cleanup finalizer and Job.

KubeRay puts the finalizer `ray.io/gcs-ft-redis-cleanup-finalizer` on a Redis-FT
RayCluster and, when the cluster is deleted, runs a Job that deletes the cluster's storage
namespace from Redis (raycluster.md §4.5). A rendered cluster is no custom resource, so
the finalizer goes on a small ConfigMap `<cluster>-redis-cleanup` in git instead; the
GitOps tool prunes it with the rest of the cluster, and the syncer then creates the Job
stored under `job.json` and removes the finalizer when it ends (or after the timeout).
The Job is KubeRay's: built from the head Pod (Ray container only, no probes, restart
policy Never, its env plus the two connect-retry variables, fixed 200m / 256Mi, backoff
limit 0, 300 s deadline, the head Pod's labels with `ray.io/node-type: redis-cleanup`).
Pure.
"""

from __future__ import annotations

from typing import Final

from renderer import naming
from renderer.manifest import Manifest, clone
from renderer.model.raycluster import RayCluster
from schemas.cluster import (
    ANN_DELETION_TIMEOUT,
    JOB_KEY,
    REDIS_CLEANUP_FINALIZER,
    ROLE_REDIS_CLEANUP,
)

NODE_TYPE: Final = "redis-cleanup"
_TLS_WAIT: Final = "wait-for-tls-ip-san"
_ECHO: Final = (
    'echo "To get more information about manually deleting the storage namespace in Redis '
    "and removing the RayCluster's finalizer, please check "
    "https://docs.ray.io/en/master/cluster/kubernetes/user-guides/kuberay-gcs-ft.html for "
    'more details."'
)
_PYTHON: Final = (
    "from ray._private.gcs_utils import cleanup_redis_storage; "
    "from urllib.parse import urlparse; import os; import sys; "
    "redis_address = os.getenv('RAY_REDIS_ADDRESS', '').split(',')[0]; "
    "redis_address = redis_address if '://' in redis_address else 'redis://' + redis_address; "
    "parsed = urlparse(redis_address); "
    "sys.exit(1) if not cleanup_redis_storage(host=parsed.hostname, port=parsed.port, "
    "{username}password=os.getenv('REDIS_PASSWORD', parsed.password or ''), "
    "use_ssl=parsed.scheme=='rediss', "
    "storage_namespace=os.getenv('RAY_external_storage_namespace')) else None"
)
_USERNAME: Final = "username=os.getenv('REDIS_USERNAME', parsed.username), "


def cleanup_script(with_username: bool) -> str:
    """KubeRay's cleanup command (the `username=` argument only with `REDIS_USERNAME`)."""
    python = _PYTHON.format(username=_USERNAME if with_username else "")
    return f'{_ECHO} && python -c "{python}"'


def anchor_name(cluster: str) -> str:
    """`<cluster>-redis-cleanup`, the anchor ConfigMap's name."""
    return f"{cluster}-redis-cleanup"


def job_name(cluster: str) -> str:
    """KubeRay's Job name, `CheckLabel(<C>-redis-cleanup)`."""
    return naming.check_label(f"{cluster}-redis-cleanup")


def build_job(cluster: RayCluster, head_pod: Manifest) -> Manifest:
    """KubeRay's Redis cleanup Job, from the built head Pod."""
    pod = clone(head_pod)
    meta = pod["metadata"]
    labels = {k: v for k, v in meta["labels"].items() if k != naming.TEMPLATE_HASH}
    labels[naming.RAY_NODE_TYPE] = NODE_TYPE
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith("kuberay.io/") and k != naming.ANN_KUBERAY_VERSION
    }
    spec = pod["spec"]
    ray = spec["containers"][0]
    env = [*(ray.get("env") or [])]
    env.append({"name": "RAY_redis_db_connect_retries", "value": "120"})
    env.append({"name": "RAY_redis_db_connect_wait_milliseconds", "value": "500"})
    with_username = any(e.get("name") == "REDIS_USERNAME" for e in env)
    fixed = {"cpu": "200m", "memory": "256Mi"}
    ray.update(
        command=["/bin/bash", "-c", "--"],
        args=[cleanup_script(with_username)],
        env=env,
        resources={"limits": dict(fixed), "requests": dict(fixed)},
    )
    ray.pop("livenessProbe", None)
    ray.pop("readinessProbe", None)
    spec["containers"] = [ray]
    init = [c for c in spec.get("initContainers") or [] if c.get("name") != _TLS_WAIT]
    if init:
        spec["initContainers"] = init
    else:
        spec.pop("initContainers", None)
    spec["restartPolicy"] = "Never"
    template_meta: Manifest = {"labels": labels}
    if annotations:
        template_meta["annotations"] = annotations
    job_meta: Manifest = {"name": job_name(cluster.name), "namespace": cluster.namespace}
    job_meta.update(template_meta)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": job_meta,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": 300,
            "template": {"metadata": clone(template_meta), "spec": spec},
        },
    }


def build_anchor(cluster: RayCluster, head_pod: Manifest) -> list[Manifest]:
    """The anchor ConfigMap of a Redis-FT cluster (none for other clusters)."""
    if not cluster.ft_enabled or cluster.ft_backend != "redis":
        return []
    labels = {
        naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
        naming.ORIGIN_KIND: cluster.origin_kind,
        naming.ORIGIN_NAME: cluster.origin_name,
        naming.RAY_CLUSTER: cluster.name,
        naming.ROLE: ROLE_REDIS_CLEANUP,
    }
    meta: Manifest = {
        "name": anchor_name(cluster.name),
        "namespace": cluster.namespace,
        "labels": labels,
        "finalizers": [REDIS_CLEANUP_FINALIZER],
    }
    timeout = cluster.annotations.get(ANN_DELETION_TIMEOUT)
    if timeout is not None:
        meta["annotations"] = {ANN_DELETION_TIMEOUT: str(timeout)}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {JOB_KEY: naming.canonical_json(build_job(cluster, head_pod))},
        }
    ]
