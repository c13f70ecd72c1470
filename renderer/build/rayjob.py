"""Everything rendered for one RayJob: its cluster, submitter, head Service and intent.

Mirrors what KubeRay v1.7 creates for a RayJob (reference rayjob.md §2-§3), with the two
random names made deterministic (DESIGN §2): the cluster `<job>-<h>` and the submission
ID `<job>-<h'>` are base-36 hashes of the job spec and of the `kuberay.io/run` annotation.
Cluster Pods run `ray start` under a shutdown-aware wrapper with `restartPolicy: Never`
(DESIGN §3). Pure: no clock, environment or I/O.

The intent ConfigMap `<job>-kuberay-intent` holds, under the key `intent.json`, canonical
JSON (sorted keys, no whitespace) that the syncer reads instead of git:

    {
      "version": 1,
      "kind": "RayJob",
      "metadata": {"name": str, "namespace": str,
                   "labels": {str: str}, "annotations": {str: str}},
      "spec": {...},           # the RayJob spec as written in git, without rayClusterSpec
      "derived": {
        "submissionMode": str,          # spec.submissionMode, CRD default K8sJobMode
        "clusterName": str,             # `<job>-<h>`, or clusterSelector["ray.io/cluster"]
        "clusterRendered": bool,        # false with clusterSelector or spec.suspend
        "submissionId": str | null,     # spec.jobId, else `<job>-<h'>`; null in
                                        # InteractiveMode until the user sets spec.jobId
        "headServiceName": str,         # the cluster's head Service
        "jobHeadServiceName": str | null,   # `<job>-head-svc`, null unless rendered
        "dashboardURL": str,            # `http://<head svc>.<ns>.svc.<domain>:<port>`
        "submitterJobName": str | null,     # the batch/v1 Job (K8sJobMode only)
        "submitterContainerName": str | null,  # in the head Pod (SidecarMode only)
        "headPodName": str | null,      # rendered Pod names; null/[] when not rendered
        "workerPodNames": [str],        # all groups, in render order
        "runtimeEnv": object | null     # runtimeEnvYAML decoded as KubeRay does (for
                                        # HTTPMode's `runtime_env`); null when empty
      }
    }
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any, Final

import yaml

from renderer import naming, templating
from renderer.build import cluster as cluster_build
from renderer.build.pods import clone
from renderer.errors import JsonPath, Problem
from renderer.gojson import GoJsonError, go_json
from renderer.model import RayCluster, document_namespace, parse_raycluster
from renderer.options import RenderOptions
from renderer.rules.rayjob import check_rayjob
from renderer.rules.versions import parse_ray_version
from schemas.intent import INTENT_VERSION

Manifest = dict[str, Any]

K8S_JOB_MODE: Final = "K8sJobMode"
HTTP_MODE: Final = "HTTPMode"
INTERACTIVE_MODE: Final = "InteractiveMode"
SIDECAR_MODE: Final = "SidecarMode"
MODES: Final = (K8S_JOB_MODE, HTTP_MODE, INTERACTIVE_MODE, SIDECAR_MODE)
SUBMITTER_CONTAINER: Final = "ray-job-submitter"
DEFAULT_DASHBOARD_PORT: Final = 8265
DEFAULT_SUBMITTER_BACKOFF_LIMIT: Final = 2
CLUSTER_SELECTOR_KEY: Final = "ray.io/cluster"
ANN_DISABLE_HEAD_RESTART: Final = "ray.io/disable-provisioned-head-restart"

# Where the Ray container sees its own annotations (a downward API volume).
PODINFO_VOLUME: Final = "kuberay-podinfo"
PODINFO_DIR: Final = "/etc/kuberay/podinfo"
PODINFO_FILE: Final = "annotations"
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

# KubeRay's submitter script (`BuildJobSubmitCommand`, rayjob.md §3.1.4): tokens joined by
# single spaces on one line.
SUBMIT_TEMPLATE: Final = (
    "until {{ probe }} >/dev/null 2>&1 ; do echo {{ waiting }} ; sleep 2 ; done ; "
    "{% if status_check %}if ! ray job status --address {{ address }} {{ job_id }}"
    " >/dev/null 2>&1 ; then {% endif %}"
    "ray job submit --address {{ address }}{% if status_check %} --no-wait{% endif %}"
    "{% for token in options %} {{ token }}{% endfor %} -- {{ entrypoint }} ;"
    "{% if status_check %} fi ; ray job logs --address {{ address }} --follow {{ job_id }}"
    "{% endif %}"
)
_PROBE: Final = (
    "python -c \"import urllib.request; r=urllib.request.urlopen('{url}', timeout=10); "
    "exit(0 if b'success' in r.read() else 1)\""
)
_SUBMITTER_RESOURCES: Final = {
    "limits": {"cpu": "1", "memory": "1Gi"},
    "requests": {"cpu": "500m", "memory": "200Mi"},
}
# CRD defaults of the top-level fields, applied before hashing so that writing a default
# out does not start a new run.
_SPEC_DEFAULTS: Final = {
    "submissionMode": K8S_JOB_MODE,
    "backoffLimit": 0,
    "ttlSecondsAfterFinished": 0,
}
# Go's unicode.IsSpace, what strings.TrimSpace removes.
_GO_SPACE: Final = (
    "\t\n\v\f\r \x85\xa0\u1680"
    + "".join(chr(code) for code in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)
_GO_SIMPLE_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}
# Masterminds/semver NewVersion, which KubeRay uses for the `--metadata-json` version check.
_SEMVER: Final = re.compile(
    r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?"
    r"(?:-([0-9A-Za-z\-]+(?:\.[0-9A-Za-z\-]+)*))?(?:\+([0-9A-Za-z\-]+(?:\.[0-9A-Za-z\-]+)*))?"
)


class _Loader(yaml.SafeLoader):
    """YAML 1.1, as sigs.k8s.io/yaml reads `runtimeEnvYAML`; timestamps stay strings."""

    yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML reads the resolvers from the class
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


# --- Go-compatible encodings (rayjob.md §3.1.4 "Encoding rules") ----------------------------


def go_quote(text: str) -> str:
    """Go's `strconv.Quote`."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _GO_SIMPLE_ESCAPES:
            out.append(_GO_SIMPLE_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif char.isprintable():
            out.append(char)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_float32(value: float) -> str:
    """Go's `fmt.Sprintf("%f", float32(value))`."""
    rounded: float = struct.unpack("f", struct.pack("f", value))[0]
    return f"{rounded:f}"


def _float32_positive(value: Any) -> bool:
    if value is None:
        return False
    rounded: float = struct.unpack("f", struct.pack("f", float(value)))[0]
    return rounded > 0


def decode_runtime_env(text: str) -> Any:
    """`runtimeEnvYAML` decoded the way KubeRay's YAMLToJSON reads it (YAML 1.1)."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects


def runtime_env_json(spec: Manifest) -> str | None:
    """`runtimeEnvYAML` as KubeRay's YAMLToJSON gives it; None when the field is empty.

    Raises:
        GoJsonError: when it holds a number Go cannot encode.
    """
    text = str(spec.get("runtimeEnvYAML") or "")
    return go_json(decode_runtime_env(text)) if text else None


# --- the plan: names and facts every object shares ------------------------------------------


@dataclass(frozen=True, slots=True)
class RayJobPlan:
    """A checked RayJob with its derived names (DESIGN §2)."""

    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: Manifest
    mode: str
    cluster_name: str
    submission_id: str | None
    selector_cluster: str | None

    @property
    def source_labels(self) -> dict[str, str]:
        """The project's labels on every object rendered for this RayJob (DESIGN §1)."""
        return {
            naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
            naming.ORIGIN_KIND: "RayJob",
            naming.ORIGIN_NAME: self.name,
        }

    @property
    def kuberay_labels(self) -> dict[str, str]:
        """KubeRay's labels on the submitter Job and its Pod template (rayjob.md §2.2)."""
        return {
            naming.RAY_ORIGIN_NAME: self.name,
            naming.RAY_ORIGIN_CRD: "RayJob",
            naming.APP_CREATED_BY: naming.KUBERAY_OPERATOR,
        }

    @property
    def suspended(self) -> bool:
        """`spec.suspend: true`: KubeRay creates neither cluster nor submitter."""
        return self.spec.get("suspend") is True


def run_key(spec: Manifest, annotations: dict[str, str]) -> Manifest:
    """What a run is made of: the spec (CRD defaults applied) and the `kuberay.io/run` value."""
    return {"spec": {**_SPEC_DEFAULTS, **spec}, "run": annotations.get(naming.RUN_ANNOTATION)}


def cluster_name(job: str, spec: Manifest, annotations: dict[str, str]) -> str:
    """`<job>-<h>`: at most 47 + 6 = 53 characters, KubeRay's RayCluster name limit."""
    return f"{job}-{naming.content_hash({'object': 'cluster', **run_key(spec, annotations)})}"


def submission_id(job: str, spec: Manifest, annotations: dict[str, str]) -> str:
    """`<job>-<h'>`, a hash independent of the cluster's."""
    key = {"object": "submission", **run_key(spec, annotations)}
    return f"{job}-{naming.content_hash(key)}"


def plan_rayjob(doc: Manifest, options: RenderOptions) -> RayJobPlan:
    """Derive the names of a checked RayJob."""
    meta = doc["metadata"]
    spec: Manifest = doc["spec"]
    name = str(meta["name"])
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    mode = str(spec.get("submissionMode") or K8S_JOB_MODE)
    selector = spec.get("clusterSelector") or {}
    selected = str(selector[CLUSTER_SELECTOR_KEY]) if selector.get(CLUSTER_SELECTOR_KEY) else None
    job_id = spec.get("jobId")
    if job_id:
        submission: str | None = str(job_id)
    elif mode == INTERACTIVE_MODE:
        submission = None
    else:
        submission = submission_id(name, spec, annotations)
    return RayJobPlan(
        name=name,
        namespace=document_namespace(doc, options),
        labels=labels,
        annotations=annotations,
        spec=spec,
        mode=mode,
        cluster_name=selected or cluster_name(name, spec, annotations),
        submission_id=submission,
        selector_cluster=selected,
    )


# --- the ray start wrapper ------------------------------------------------------------------


def wrap_ray_start(ray_start: str, *, annotations_file: str = "") -> str:
    """Shell text that runs `ray_start` and stops Ray when the pod asks for shutdown.

    `annotations_file` is the downward API file to poll (tests point it elsewhere).
    """
    return templating.render_string(
        WRAPPER_TEMPLATE,
        {
            "ray_start": ray_start,
            "pattern": naming.SHUTDOWN_REQUESTED.replace(".", "\\."),
            "file": annotations_file or f"{PODINFO_DIR}/{PODINFO_FILE}",
            "annotation": naming.SHUTDOWN_REQUESTED,
            "poll": SHUTDOWN_POLL_SECONDS,
        },
    ).rstrip("\n")


def _podinfo_volume() -> Manifest:
    return {
        "name": PODINFO_VOLUME,
        "downwardAPI": {
            "items": [{"path": PODINFO_FILE, "fieldRef": {"fieldPath": "metadata.annotations"}}]
        },
    }


def _podinfo_mount() -> Manifest:
    return {"name": PODINFO_VOLUME, "mountPath": PODINFO_DIR, "readOnly": True}


def _group_templates(cluster_spec: Manifest) -> list[tuple[JsonPath, Manifest]]:
    base: JsonPath = ("spec", "rayClusterSpec")
    groups = [((*base, "headGroupSpec"), cluster_spec["headGroupSpec"])]
    groups.extend(
        ((*base, "workerGroupSpecs", i), group)
        for i, group in enumerate(cluster_spec.get("workerGroupSpecs") or [])
    )
    return groups


def _check_podinfo(cluster_spec: Manifest) -> list[Problem]:
    """The downward API volume must not clash with the user's volumes or mounts."""
    problems: list[Problem] = []
    for at, group in _group_templates(cluster_spec):
        pod = (group.get("template") or {}).get("spec") or {}
        for i, volume in enumerate(pod.get("volumes") or []):
            if volume.get("name") == PODINFO_VOLUME:
                problems.append(
                    Problem(
                        (*at, "template", "spec", "volumes", i, "name"),
                        f"the volume name {PODINFO_VOLUME} is reserved by kuberay render for the "
                        "RayJob shutdown wrapper; rename the volume",
                    )
                )
        containers = pod.get("containers") or []
        for i, mount in enumerate((containers[0] if containers else {}).get("volumeMounts") or []):
            if mount.get("mountPath") == PODINFO_DIR:
                problems.append(
                    Problem(
                        (*at, "template", "spec", "containers", 0, "volumeMounts", i, "mountPath"),
                        f"the path {PODINFO_DIR} is reserved by kuberay render for the RayJob "
                        "shutdown wrapper; mount the volume elsewhere",
                    )
                )
    return problems


def _add_podinfo(cluster_spec: Manifest) -> None:
    """Give the Ray container of every group its annotations, read-only."""
    for _, group in _group_templates(cluster_spec):
        pod = group["template"].setdefault("spec", {})
        pod.setdefault("volumes", []).append(_podinfo_volume())
        pod["containers"][0].setdefault("volumeMounts", []).append(_podinfo_mount())


def _check_wrapped(cluster_spec: Manifest, objects: list[Manifest]) -> list[Problem]:
    """Warn once per group whose command the wrapper cannot reach (the user runs `ray start`)."""
    unwrapped: set[str] = set()
    for obj in objects:
        if obj.get("kind") != "Pod":
            continue
        args = obj["spec"]["containers"][0].get("args") or []
        if not any(naming.SHUTDOWN_REQUESTED in str(arg) for arg in args):
            unwrapped.add(str(obj["metadata"]["labels"].get(naming.RAY_GROUP)))
    problems = []
    for at, group in _group_templates(cluster_spec):
        name = naming.HEAD_GROUP if at[-1] == "headGroupSpec" else str(group.get("groupName"))
        if name in unwrapped:
            problems.append(
                Problem(
                    (*at, "template", "spec", "containers", 0),
                    "this Ray container runs its own `ray start` (or the RayJob sets "
                    "ray.io/overwrite-container-cmd), so kuberay render cannot wrap it: the "
                    f"syncer's {naming.SHUTDOWN_REQUESTED} annotation will not stop its Pods",
                    "warning",
                )
            )
    return problems


# --- the submitter script and container -----------------------------------------------------


def _metadata_version_error(plan: RayJobPlan) -> str | None:
    """KubeRay refuses `--metadata-json` for an explicit rayVersion below 2.6.0."""
    cluster_spec = plan.spec.get("rayClusterSpec")
    if cluster_spec is None:
        return None
    version = str(cluster_spec.get("rayVersion") or "")
    if not version:
        return None
    match = _SEMVER.fullmatch(version)
    if match is None:
        return (
            f"failed to parse Ray version: {version}: Invalid Semantic Version; KubeRay cannot "
            "pass metadata to `ray job submit` and the RayJob stays Initializing: fix "
            "rayClusterSpec.rayVersion"
        )
    numbers = tuple(int(g) if g else 0 for g in match.groups()[:3])
    prerelease = match.group(4)
    if numbers < (2, 6, 0) or prerelease is not None:
        return (
            "the Ray version must be at least 2.6.0 to use the metadata field (got "
            f"{version}); KubeRay never submits the job: raise rayClusterSpec.rayVersion or "
            "remove spec.metadata"
        )
    return None


def submit_options(spec: Manifest, submission: str | None) -> list[str]:
    """The `[OPTIONS]` tokens of `ray job submit`, in KubeRay's order.

    Raises:
        GoJsonError: when runtimeEnvYAML holds a number Go cannot encode.
    """
    tokens: list[str] = []
    runtime_env = runtime_env_json(spec)
    if runtime_env is not None:
        tokens += ["--runtime-env-json", go_quote(runtime_env)]
    metadata = spec.get("metadata") or {}
    if metadata:
        encoded = go_json({str(k): str(v) for k, v in metadata.items()})
        tokens += ["--metadata-json", go_quote(encoded)]
    if submission:
        tokens += ["--submission-id", submission]
    for field, flag in (
        ("entrypointNumCpus", "--entrypoint-num-cpus"),
        ("entrypointNumGpus", "--entrypoint-num-gpus"),
    ):
        if _float32_positive(spec.get(field)):
            tokens += [flag, go_float32(float(spec[field]))]
    resources = str(spec.get("entrypointResources") or "")
    if resources:
        tokens += ["--entrypoint-resources", go_quote(resources)]
    return tokens


def submit_script(
    spec: Manifest,
    submission: str | None,
    *,
    address: str,
    health_url: str,
    status_check: bool,
) -> str:
    """KubeRay's submitter script: wait for GCS, submit once, then follow the logs."""
    return templating.render_string(
        SUBMIT_TEMPLATE,
        {
            "probe": _PROBE.format(url=health_url),
            "waiting": go_quote(
                f"Waiting for Ray Dashboard GCS to become healthy at {address} ..."
            ),
            "status_check": status_check,
            "address": address,
            "job_id": submission or "",
            "options": submit_options(spec, submission),
            "entrypoint": str(spec.get("entrypoint") or "").strip(_GO_SPACE),
        },
    )


def _shell(options: RenderOptions) -> list[str]:
    return ["/bin/bash", "-cel" if options.login_shell else "-ce", "--"]


def _has_env(container: Manifest, name: str) -> bool:
    return any(e.get("name") == name for e in container.get("env") or [])


def _configure_submitter(
    container: Manifest,
    script: str,
    *,
    force_command: bool,
    dashboard_url: str,
    submission: str | None,
    auth: tuple[str, Manifest] | None,
    options: RenderOptions,
) -> None:
    """KubeRay's configureSubmitterContainer: command (if unset), env, token auth env."""
    if force_command or not container.get("command"):
        container["command"] = _shell(options)
        container["args"] = [script]
    env = container.setdefault("env", [])
    env.append({"name": "PYTHONUNBUFFERED", "value": "1"})
    env.append({"name": "RAY_DASHBOARD_ADDRESS", "value": dashboard_url})
    env.append({"name": "RAY_JOB_SUBMISSION_ID", "value": submission or ""})
    if auth is None:
        return
    cluster, auth_options = auth
    if not _has_env(container, "RAY_AUTH_MODE"):
        env.append({"name": "RAY_AUTH_MODE", "value": "token"})
    if not _has_env(container, "RAY_AUTH_TOKEN"):
        secret = auth_options.get("secretName") or naming.check_name(cluster)
        env.append(
            {
                "name": "RAY_AUTH_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": secret, "key": "auth_token"}},
            }
        )


def _default_submitter(head_container: Manifest) -> Manifest:
    container: Manifest = {"name": SUBMITTER_CONTAINER}
    if head_container.get("image"):
        container["image"] = head_container["image"]
    container["resources"] = clone(_SUBMITTER_RESOURCES)
    return container


def _auth(plan: RayJobPlan) -> tuple[str, Manifest] | None:
    cluster_spec = plan.spec.get("rayClusterSpec") or {}
    auth = cluster_spec.get("authOptions") or {}
    return (plan.cluster_name, auth) if auth.get("mode") == "token" else None


def _head_container(spec: Manifest) -> Manifest:
    container: Manifest = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][
        0
    ]
    return container


def _dashboard_container_port(container: Manifest) -> int:
    """`FindContainerPort(head, "dashboard", 8265)`."""
    for port in container.get("ports") or []:
        if port.get("name") == "dashboard":
            return int(port["containerPort"])
    return DEFAULT_DASHBOARD_PORT


def build_sidecar_submitter(plan: RayJobPlan, options: RenderOptions) -> Manifest:
    """The submitter container KubeRay appends to the head Pod in SidecarMode (§3.3)."""
    head = _head_container(plan.spec)
    port = _dashboard_container_port(head)
    restart = options.gate("SidecarSubmitterRestart")
    script = submit_script(
        plan.spec,
        plan.submission_id,
        address=f"http://127.0.0.1:{port}",
        health_url=f"http://localhost:{port}/api/gcs_healthz",
        status_check=restart,
    )
    container = _default_submitter(head)
    # The cluster is built before the dashboard URL is known, so the address stays empty.
    _configure_submitter(
        container,
        script,
        force_command=True,
        dashboard_url="",
        submission=plan.submission_id,
        auth=_auth(plan),
        options=options,
    )
    if restart:
        container["restartPolicy"] = "OnFailure"
    return container


def build_submitter_job(
    plan: RayJobPlan, options: RenderOptions, *, dashboard_url: str
) -> Manifest:
    """The K8sJobMode submitter Job (§3.1), gated until the syncer sees the cluster ready."""
    spec = plan.spec
    user_template = spec.get("submitterPodTemplate")
    if user_template is not None:
        template: Manifest = clone(user_template)
    else:
        template = {
            "spec": {
                "containers": [_default_submitter(_head_container(spec))],
                "restartPolicy": "Never",
            }
        }
    pod = template.setdefault("spec", {})
    address = dashboard_url if dashboard_url.startswith("http://") else f"http://{dashboard_url}"
    script = submit_script(
        spec,
        plan.submission_id,
        address=address,
        health_url=f"{address}/api/gcs_healthz",
        status_check=True,
    )
    _configure_submitter(
        pod["containers"][0],
        script,
        force_command=False,
        dashboard_url=dashboard_url,
        submission=plan.submission_id,
        auth=_auth(plan),
        options=options,
    )
    gates = pod.setdefault("schedulingGates", [])
    if not any(g.get("name") == naming.CLUSTER_READY_GATE for g in gates):
        gates.append({"name": naming.CLUSTER_READY_GATE})
    meta = template.setdefault("metadata", {})
    meta["labels"] = {
        **(meta.get("labels") or {}),
        **plan.kuberay_labels,
        **plan.source_labels,
    }
    submitter_config = spec.get("submitterConfig") or {}
    backoff = submitter_config.get("backoffLimit")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": plan.name,
            "namespace": plan.namespace,
            "labels": {**plan.kuberay_labels, **plan.source_labels},
        },
        # KubeRay sets no ttlSecondsAfterFinished: the Job stays for its logs (§3.1.1).
        "spec": {
            "backoffLimit": DEFAULT_SUBMITTER_BACKOFF_LIMIT if backoff is None else backoff,
            "template": template,
        },
    }


# --- the cluster ----------------------------------------------------------------------------


def build_job_cluster(plan: RayJobPlan) -> RayCluster:
    """The RayCluster KubeRay would create for the job (§2.2), as a model to build."""
    cluster_spec: Manifest = clone(plan.spec["rayClusterSpec"])
    labels = {
        **plan.labels,
        naming.RAY_ORIGIN_NAME: plan.name,
        naming.RAY_ORIGIN_CRD: "RayJob",
        naming.RAY_JOB_SUBMISSION_MODE: plan.mode,
    }
    annotations = dict(plan.annotations)
    _add_podinfo(cluster_spec)
    return parse_raycluster(
        plan.cluster_name,
        plan.namespace,
        cluster_spec,
        labels=labels,
        annotations=annotations,
        creator="RayJob",
        origin_kind="RayJob",
        origin_name=plan.name,
        start_wrapper=wrap_ray_start,
        restart_policy="Never",
    )


def _with_sidecar(cluster: RayCluster, plan: RayJobPlan, options: RenderOptions) -> RayCluster:
    """SidecarMode: the submitter joins the head Pod, and the cluster is marked (§3.3)."""
    head_pod = cluster.spec["headGroupSpec"]["template"]["spec"]
    head_pod["containers"].append(build_sidecar_submitter(plan, options))
    head_pod["restartPolicy"] = "Never"
    return parse_raycluster(
        cluster.name,
        cluster.namespace,
        cluster.spec,
        labels=cluster.labels,
        annotations={**cluster.annotations, ANN_DISABLE_HEAD_RESTART: "true"},
        creator=cluster.creator,
        origin_kind=cluster.origin_kind,
        origin_name=cluster.origin_name,
        start_wrapper=cluster.start_wrapper,
        restart_policy=cluster.restart_policy,
    )


def _job_head_service(plan: RayJobPlan, cluster_service: Manifest) -> Manifest:
    """`<job>-head-svc`: the cluster head Service's spec under a name stable across runs."""
    service: Manifest = clone(cluster_service)
    service["metadata"]["name"] = naming.head_service_name(plan.name)
    service["metadata"]["labels"] = {
        naming.RAY_ORIGIN_NAME: plan.name,
        naming.RAY_ORIGIN_CRD: "RayJob",
        naming.RAY_NODE_TYPE: "head",
        naming.RAY_IDENTIFIER: naming.identifier(plan.name, "head"),
        **plan.source_labels,
    }
    return service


def _dashboard_port(service: Manifest) -> int | None:
    for port in service["spec"].get("ports") or []:
        if port.get("name") == "dashboard":
            return int(port["port"])
    return None


# --- the intent -----------------------------------------------------------------------------


def build_intent(plan: RayJobPlan, derived: Manifest) -> Manifest:
    """The ConfigMap that tells the syncer what git asked for (see the module docstring)."""
    intent = {
        "version": INTENT_VERSION,
        "kind": "RayJob",
        "metadata": {
            "name": plan.name,
            "namespace": plan.namespace,
            "labels": plan.labels,
            "annotations": plan.annotations,
        },
        "spec": {k: v for k, v in plan.spec.items() if k != "rayClusterSpec"},
        "derived": derived,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": naming.intent_configmap_name(plan.name),
            "namespace": plan.namespace,
            "labels": {**plan.source_labels, naming.ROLE: naming.ROLE_INTENT},
        },
        "data": {naming.INTENT_KEY: naming.canonical_json(intent)},
    }


# --- checks only the builder can make -------------------------------------------------------


def _check_plan(plan: RayJobPlan, options: RenderOptions) -> list[Problem]:
    problems: list[Problem] = []
    spec = plan.spec
    if plan.mode not in MODES:
        problems.append(
            Problem(
                ("spec", "submissionMode"),
                f"unknown submissionMode {plan.mode!r}: KubeRay never submits such a job; use "
                f"one of {', '.join(MODES)}",
                "warning",
            )
        )
    submits = plan.mode in (K8S_JOB_MODE, SIDECAR_MODE) and not plan.suspended
    if submits and spec.get("metadata"):
        error = _metadata_version_error(plan)
        if error is not None:
            problems.append(Problem(("spec", "metadata"), error))
    try:
        runtime_env_json(spec)
    except (GoJsonError, yaml.YAMLError) as exc:
        problems.append(
            Problem(
                ("spec", "runtimeEnvYAML"),
                f"runtimeEnvYAML cannot be converted to JSON: {str(exc).splitlines()[0]}; "
                "write a YAML mapping of plain values with finite numbers",
            )
        )
    if plan.mode == K8S_JOB_MODE and not plan.suspended:
        problems.extend(_check_submitter_template(plan))
    if plan.mode == SIDECAR_MODE and options.gate("SidecarSubmitterRestart"):
        version = parse_ray_version(options.kubernetes_version)
        if version is not None and version < (1, 35, 0):
            problems.append(
                Problem(
                    ("spec", "submissionMode"),
                    "the SidecarSubmitterRestart feature gate needs Kubernetes 1.35 or newer "
                    "(per-container restartPolicy), but the target is "
                    f"{options.kubernetes_version}; raise the Kubernetes version or turn the "
                    "gate off",
                )
            )
    if spec.get("rayClusterSpec") is not None and plan.selector_cluster is None:
        problems.extend(_check_podinfo(spec["rayClusterSpec"]))
    return problems


def _check_submitter_template(plan: RayJobPlan) -> list[Problem]:
    spec = plan.spec
    template = spec.get("submitterPodTemplate")
    at: JsonPath = ("spec", "submitterPodTemplate")
    if template is None:
        if plan.selector_cluster is not None:
            return [
                Problem(
                    ("spec", "clusterSelector"),
                    "a K8sJobMode RayJob with clusterSelector needs spec.submitterPodTemplate: "
                    "KubeRay takes the submitter image from the live RayCluster "
                    f"{plan.selector_cluster!r}, which kuberay render cannot read; set "
                    "submitterPodTemplate (with the image) or use submissionMode HTTPMode",
                )
            ]
        return []
    pod = template.get("spec") or {}
    problems: list[Problem] = []
    if not pod.get("containers"):
        problems.append(Problem((*at, "spec"), "submitterPodTemplate needs at least one container"))
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append(
            Problem(
                (*at, "spec", "restartPolicy") if "restartPolicy" in pod else (*at, "spec"),
                "a Job's Pod template needs restartPolicy Never or OnFailure and KubeRay copies "
                "submitterPodTemplate as is; set restartPolicy: Never",
            )
        )
    return problems


# --- the entry point ------------------------------------------------------------------------

_HEAD_PORTS_AT: Final[JsonPath] = (
    "spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "containers", 0, "ports"
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _ClusterFacts:
    """What the submitter and the intent need to know about the rendered cluster."""

    objects: list[Manifest]
    head_service: str
    dashboard_port: int
    job_head_service: str | None
    head_pod: str | None
    worker_pods: list[str]


def _pod_names(objects: list[Manifest], node_type: str) -> list[str]:
    return [
        str(o["metadata"]["name"])
        for o in objects
        if o["kind"] == "Pod" and o["metadata"]["labels"].get(naming.RAY_NODE_TYPE) == node_type
    ]


def _build_cluster_objects(
    plan: RayJobPlan, options: RenderOptions
) -> tuple[list[Problem], _ClusterFacts | None]:
    """The job's cluster, its wrapper warnings and the RayJob head Service."""
    cluster = build_job_cluster(plan)
    if plan.mode == SIDECAR_MODE:
        cluster = _with_sidecar(cluster, plan, options)
    problems = cluster_build.check_cluster(cluster)
    if _has_error(problems):
        return problems, None
    built = cluster_build.build_cluster(cluster, options, job_name=plan.name)
    head_service = cluster.head_service_name
    service = next(
        o for o in built if o["kind"] == "Service" and o["metadata"]["name"] == head_service
    )
    port = _dashboard_port(service)
    if port is None:
        message = (
            "the head container has ports but none named 'dashboard': KubeRay cannot find the "
            "dashboard URL and the RayJob never leaves Initializing; name the dashboard port "
            "'dashboard'"
        )
        return [*problems, Problem(_HEAD_PORTS_AT, message)], None
    problems.extend(_check_wrapped(plan.spec["rayClusterSpec"], built))
    job_head_service: str | None = naming.head_service_name(plan.name)
    if job_head_service == head_service:  # a custom head Service name took it already
        job_head_service = None
    else:
        built.append(_job_head_service(plan, service))
    heads = _pod_names(built, "head")
    facts = _ClusterFacts(
        objects=built,
        head_service=head_service,
        dashboard_port=port,
        job_head_service=job_head_service,
        head_pod=heads[0] if heads else None,
        worker_pods=_pod_names(built, "worker"),
    )
    return problems, facts


def build_rayjob(doc: Manifest, options: RenderOptions) -> tuple[list[Problem], list[Manifest]]:
    """Check a schema-valid RayJob and build its objects (none when any problem is an error)."""
    problems = check_rayjob(doc, options)
    managed_by = (doc.get("spec") or {}).get("managedBy")
    if managed_by not in (None, "ray.io/kuberay-operator") or _has_error(problems):
        return problems, []
    plan = plan_rayjob(doc, options)
    problems.extend(_check_plan(plan, options))
    if _has_error(problems):
        return problems, []
    facts: _ClusterFacts | None = None
    if plan.selector_cluster is None and not plan.suspended:
        more, facts = _build_cluster_objects(plan, options)
        problems.extend(more)
        if facts is None:
            return problems, []
    objects = list(facts.objects) if facts else []
    head_service = facts.head_service if facts else naming.head_service_name(plan.cluster_name)
    port = facts.dashboard_port if facts else DEFAULT_DASHBOARD_PORT
    dashboard_url = f"{head_service}.{plan.namespace}.svc.{options.cluster_domain}:{port}"
    submitter = plan.mode == K8S_JOB_MODE and not plan.suspended
    if submitter:
        objects.append(build_submitter_job(plan, options, dashboard_url=dashboard_url))
    runtime_env = runtime_env_json(plan.spec)
    derived: Manifest = {
        "submissionMode": plan.mode,
        "clusterName": plan.cluster_name,
        "clusterRendered": facts is not None,
        "submissionId": plan.submission_id,
        "headServiceName": head_service,
        "jobHeadServiceName": facts.job_head_service if facts else None,
        "dashboardURL": f"http://{dashboard_url}",
        "submitterJobName": plan.name if submitter else None,
        "submitterContainerName": (
            SUBMITTER_CONTAINER if plan.mode == SIDECAR_MODE and facts else None
        ),
        "headPodName": facts.head_pod if facts else None,
        "workerPodNames": facts.worker_pods if facts else [],
        "runtimeEnv": None if runtime_env is None else json.loads(runtime_env),
    }
    objects.append(build_intent(plan, derived))
    return problems, objects


def _has_error(problems: list[Problem]) -> bool:
    return any(p.severity == "error" for p in problems)
