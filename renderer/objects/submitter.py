"""The submitter of a RayJob: KubeRay's `ray job submit` script, container and Job (rayjob.md §3).

K8sJobMode gets a batch/v1 Job, gated until the syncer sees the cluster ready; SidecarMode
a container appended to the head Pod. The script's tokens are written with Go's text forms
(`goformat`), as KubeRay's `BuildJobSubmitCommand` writes them. Pure.
"""

from __future__ import annotations

from typing import Final

from renderer import naming, templating
from renderer.goformat import go_float32, go_json, go_quote, go_trim_space, is_positive_float32
from renderer.manifest import Manifest, clone
from renderer.model.raycluster import DEFAULT_DASHBOARD_PORT
from renderer.model.rayjob import RayJobPlan, runtime_env_json
from renderer.options import RenderOptions

SUBMITTER_CONTAINER: Final = "ray-job-submitter"
DEFAULT_SUBMITTER_BACKOFF_LIMIT: Final = 2

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
        if is_positive_float32(spec.get(field)):
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
            "entrypoint": go_trim_space(str(spec.get("entrypoint") or "")),
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
        if plan.selector_cluster is not None:
            # The selected cluster is in the same run (the rules refuse otherwise, §3.1.2).
            image = options.input_head_images[(plan.namespace, plan.selector_cluster)]
            head: Manifest = {"image": image}
        else:
            head = _head_container(spec)
        template = {
            "spec": {
                "containers": [_default_submitter(head)],
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
