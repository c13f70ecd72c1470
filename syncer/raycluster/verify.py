"""Whether a Redis cleanup Job is the one the renderer derives from the live head Pod.

The anchor ConfigMap `<cluster>-redis-cleanup` is a ConfigMap: whoever may write ConfigMaps
in the namespace can forge one, or edit the real one, and so choose the Job the syncer
creates. `cleanup.checked_job` fixes KubeRay's command, limits and labels; this module fixes
everything else, by comparing the Job's pod with the head Pod it is derived from
(raycluster.md §4.5: the head's pod spec, its Ray container with only the command, args, env
additions, resources and probes changed, minus the `wait-for-tls-ip-san` init container).
The head Pod was created by the GitOps tool from git, so a Job equal to it grants nothing
its creator could not already run. `mismatch` names the first field that differs, as a JSON
path; None means the Job is the head's.

The head Pod is read live, so it carries what the API server filled in: the fields in
`_POD_DEFAULTED` and `_CONTAINER_DEFAULTED` may be absent from the Job (the server fills
them the same way for it), so may the placement a queue or scheduler adds to the head
(`_POD_PLACED`: gates, node selector, affinity), the projected service-account token volume
and its mounts are ignored, the default tolerations may be missing from the Job, and values
equal to a known default (`defaultMode: 420`, `fieldRef.apiVersion: v1`, port `protocol:
TCP`, empty objects) compare equal to their absence. Anything else only in the head (a
security context, a volume) or only in the Job is a mismatch. The pod template's labels and
annotations must be the head's (an annotation can loosen AppArmor or seccomp, a label can
match a NetworkPolicy), bar the node type and what the renderer leaves out. Pure.
"""

from __future__ import annotations

from typing import Any, Final

Manifest = dict[str, Any]

TLS_WAIT: Final = "wait-for-tls-ip-san"
NODE_TYPE_LABEL: Final = "ray.io/node-type"
# The Job controller's labels on its pods (absent from a Job as written).
JOB_LABELS: Final = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)
EXTRA_ENV: Final = (
    {"name": "RAY_redis_db_connect_retries", "value": "120"},
    {"name": "RAY_redis_db_connect_wait_milliseconds", "value": "500"},
)
# Changed by the derivation itself (checked by `cleanup.checked_job`).
_DERIVED: Final = frozenset(
    {"command", "args", "env", "resources", "livenessProbe", "readinessProbe"}
)
_POD_DEFAULTED: Final = frozenset(
    {
        "dnsPolicy",
        "schedulerName",
        "terminationGracePeriodSeconds",
        "enableServiceLinks",
        "serviceAccount",
        "serviceAccountName",
        "nodeName",
        "preemptionPolicy",
        "priority",
        "priorityClassName",
    }
)
# Placement a scheduler or queue adds to the head Pod (Kueue, batch schedulers): the Job
# may leave it out; if it has one, it must be the head's.
_POD_PLACED: Final = frozenset(
    {"schedulingGates", "nodeSelector", "affinity", "topologySpreadConstraints"}
)
_CONTAINER_DEFAULTED: Final = frozenset(
    {"imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy"}
)
_TOKEN_PREFIX: Final = "kube-api-access-"
_TOKEN_PATH: Final = "/var/run/secrets/kubernetes.io/serviceaccount"


def _normal(value: Any) -> Any:
    """`value` with empty values and known server defaults dropped (for comparison)."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            item = _normal(item)
            if item in (None, {}, []):
                continue
            if (key, item) in (("defaultMode", 420), ("protocol", "TCP")):
                continue
            if key == "fieldRef" and isinstance(item, dict) and item.get("apiVersion") == "v1":
                item = {k: v for k, v in item.items() if k != "apiVersion"}
            out[key] = item
        return out
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _present(value: Any) -> Any:
    """`_normal(value)`, with an empty object or list as None (absent); `False` stays."""
    value = _normal(value)
    return None if value in ({}, []) else value


def _not_token(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return True
    name = str(entry.get("name") or "")
    return not (name.startswith(_TOKEN_PREFIX) or entry.get("mountPath") == _TOKEN_PATH)


def _compare(
    job: Manifest, head: Manifest, path: str, *, skip: frozenset[str], defaulted: frozenset[str]
) -> str | None:
    for key in sorted(set(job) | set(head)):
        if key in skip:
            continue
        mine, theirs = _present(job.get(key)), _present(head.get(key))
        if key not in job and key in defaulted:
            continue  # filled by the server for the Job as it was for the head
        if key in ("volumes", "volumeMounts") and isinstance(head.get(key), list):
            theirs = _present([v for v in head[key] if _not_token(v)])
        if mine != theirs:
            return f"{path}.{key}"
    return None


def _container(job: Manifest, head: Manifest, path: str, *, ray: bool) -> str | None:
    found = _compare(
        job,
        head,
        path,
        skip=_DERIVED if ray else frozenset(),
        defaulted=_CONTAINER_DEFAULTED | (frozenset({"resources"}) if not ray else frozenset()),
    )
    if found is not None or not ray:
        return found
    wanted = _normal([*(head.get("env") or []), *EXTRA_ENV])
    if _normal(job.get("env") or []) != wanted:
        return f"{path}.env"
    return None


def _metadata(template: Manifest, head_pod: Manifest) -> str | None:
    """Template labels and annotations: each one the head Pod's (node type excepted)."""
    mine = template.get("metadata") or {}
    theirs = head_pod.get("metadata") or {}
    for field in ("labels", "annotations"):
        have = theirs.get(field) or {}
        for key, value in (mine.get(field) or {}).items():
            if field == "labels" and key in (NODE_TYPE_LABEL, *JOB_LABELS):
                continue
            if have.get(key) != value:
                return f"spec.template.metadata.{field}[{key}]"
    return None


def mismatch(job: Manifest, head_pod: Manifest) -> str | None:
    """The first field in which `job`'s pod differs from the one derived from `head_pod`."""
    template = (job.get("spec") or {}).get("template") or {}
    pod = template.get("spec") or {}
    head = head_pod.get("spec") or {}
    base = "spec.template.spec"
    found = _metadata(template, head_pod)
    if found is not None:
        return found
    containers, head_containers = pod.get("containers") or [], head.get("containers") or []
    if len(containers) != 1 or not head_containers:
        return f"{base}.containers"
    found = _container(containers[0], head_containers[0], f"{base}.containers[0]", ray=True)
    if found is not None:
        return found
    inits = pod.get("initContainers") or []
    head_inits = [c for c in head.get("initContainers") or [] if c.get("name") != TLS_WAIT]
    if len(inits) != len(head_inits):
        return f"{base}.initContainers"
    for index, (mine, theirs) in enumerate(zip(inits, head_inits, strict=True)):
        found = _container(mine, theirs, f"{base}.initContainers[{index}]", ray=False)
        if found is not None:
            return found
    tolerations = [_normal(t) for t in pod.get("tolerations") or []]
    allowed = [_normal(t) for t in head.get("tolerations") or []]
    if any(t not in allowed for t in tolerations):
        return f"{base}.tolerations"
    return _compare(
        pod,
        head,
        base,
        skip=frozenset({"containers", "initContainers", "restartPolicy", "tolerations"}),
        defaulted=_POD_DEFAULTED | _POD_PLACED,
    )
