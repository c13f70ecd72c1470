"""Head and worker Pods, built the way KubeRay v1.7 builds them (raycluster.md §2).

Each step below follows KubeRay's build order, so env vars, init containers and
volumes come out in the same order. Random parts of KubeRay's output (generated
names, multi-host replica names) are replaced by content hashes (DESIGN §2).
"""

from __future__ import annotations

from typing import Final

from renderer import naming
from renderer.manifest import Manifest, clone
from renderer.model.raycluster import (
    DEFAULT_DASHBOARD_PORT,
    DEFAULT_SERVE_PORT,
    RayCluster,
    WorkerGroup,
)
from renderer.objects import autoscaling, shape, startparams
from renderer.options import RenderOptions
from renderer.rules.versions import at_least

DEFAULT_AGENT_PORT: Final = 52365
METRICS_PORT: Final = 8080
TLS_DIR: Final = "/etc/ray/tls"
TOKEN_DIR: Final = "/var/run/secrets/ray.io/serviceaccount"
GCS_DIR: Final = "/data/gcs"
ULIMIT: Final = "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; "

_WAIT_GCS_SCRIPT: Final = (
    "\n\t\t\t\t\tSECONDS=0\n\t\t\t\t\twhile true; do\n\t\t\t\t\t\tif (( SECONDS <= 120 )); then\n"
    "\t\t\t\t\t\t\tif ray health-check --address {ADDR} > /dev/null 2>&1; then\n"
    '\t\t\t\t\t\t\t\techo "GCS is ready."\n\t\t\t\t\t\t\t\tbreak\n\t\t\t\t\t\t\tfi\n'
    '\t\t\t\t\t\t\techo "$SECONDS seconds elapsed: Waiting for GCS to be ready."\n'
    "\t\t\t\t\t\telse\n\t\t\t\t\t\t\tif ray health-check --address {ADDR}; then\n"
    '\t\t\t\t\t\t\t\techo "GCS is ready. Any error messages above can be safely ignored."\n'
    "\t\t\t\t\t\t\t\tbreak\n\t\t\t\t\t\t\tfi\n"
    '\t\t\t\t\t\t\techo "$SECONDS seconds elapsed: Still waiting for GCS to be ready. For '
    "troubleshooting, refer to the FAQ at "
    'https://docs.ray.io/en/master/cluster/kubernetes/troubleshooting.html."\n'
    "\t\t\t\t\t\tfi\n\t\t\t\t\t\tsleep 5\n\t\t\t\t\tdone\n\t\t\t\t"
)
_TLS_WAIT_SCRIPT: Final = (
    'CERT="/etc/ray/tls/tls.crt"\nif [ -z "${POD_IP}" ]; then\n'
    "  POD_IP=$(hostname -i 2>/dev/null | awk '{print $1}')\nfi\n"
    "if ! command -v openssl >/dev/null 2>&1; then\n"
    '  echo "openssl not found; cannot verify IP SAN" >&2\n  exit 1\nfi\n'
    'echo "Waiting for TLS cert to include IP SAN for ${POD_IP}..."\nwhile true; do\n'
    '  if openssl x509 -in "${CERT}" -noout -text 2>/dev/null | grep -qE '
    '"IP Address:${POD_IP}([^0-9.]|$)"; then\n'
    '    echo "TLS cert now includes IP SAN for ${POD_IP}"\n    exit 0\n  fi\n'
    '  echo "IP SAN for ${POD_IP} not yet in cert, retrying in 5s..."\n  sleep 5\ndone'
)
_TLS_ENV: Final = (
    ("RAY_USE_TLS", "1"),
    ("RAY_TLS_SERVER_CERT", f"{TLS_DIR}/tls.crt"),
    ("RAY_TLS_SERVER_KEY", f"{TLS_DIR}/tls.key"),
    ("RAY_TLS_CA_CERT", f"{TLS_DIR}/ca.crt"),
)
_COLLECTOR: Final = "ray-history-collector"
_EVENT_TYPES: Final = (
    "TASK_DEFINITION_EVENT,TASK_LIFECYCLE_EVENT,ACTOR_TASK_DEFINITION_EVENT,TASK_PROFILE_EVENT,"
    "DRIVER_JOB_DEFINITION_EVENT,DRIVER_JOB_LIFECYCLE_EVENT,ACTOR_DEFINITION_EVENT,"
    "ACTOR_LIFECYCLE_EVENT,NODE_DEFINITION_EVENT,NODE_LIFECYCLE_EVENT"
)


def _field_env(name: str, path: str) -> Manifest:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _has_env(container: Manifest, name: str) -> bool:
    return any(e.get("name") == name for e in container.get("env") or [])


def _append_env(container: Manifest, entry: Manifest, *, if_absent: bool = True) -> None:
    if if_absent and _has_env(container, entry["name"]):
        return
    container.setdefault("env", []).append(entry)


def _set_env(container: Manifest, name: str, value: str, *, if_absent: bool = True) -> None:
    _append_env(container, {"name": name, "value": value}, if_absent=if_absent)


def _append_mount(container: Manifest, mount: Manifest) -> None:
    container.setdefault("volumeMounts", []).append(mount)


def _has_mount(container: Manifest, *, name: str | None = None, path: str | None = None) -> bool:
    for mount in container.get("volumeMounts") or []:
        if name is not None and mount.get("name") == name:
            return True
        if path is not None and mount.get("mountPath") == path:
            return True
    return False


def _add_volume(pod_spec: Manifest, volume: Manifest) -> None:
    volumes = pod_spec.setdefault("volumes", [])
    if not any(v.get("name") == volume["name"] for v in volumes):
        volumes.append(volume)


# --- auth, TLS and GCS fault tolerance -----------------------------------------------------


def _auth(cluster: RayCluster) -> Manifest | None:
    auth = cluster.spec.get("authOptions")
    if auth is None or auth.get("mode") != "token":
        return None
    result: Manifest = auth
    return result


def _apply_token_auth(cluster: RayCluster, pod_spec: Manifest, container: Manifest) -> None:
    auth = _auth(cluster)
    if auth is None:
        return
    _set_env(container, "RAY_AUTH_MODE", "token")
    if auth.get("enableK8sTokenAuth") is True:
        _set_env(container, "RAY_ENABLE_K8S_TOKEN_AUTH", "true")
        if not _has_mount(container, name="ray-token"):
            _append_mount(
                container, {"name": "ray-token", "mountPath": TOKEN_DIR, "readOnly": True}
            )
        _add_volume(
            pod_spec,
            {
                "name": "ray-token",
                "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
            },
        )
    else:
        secret = auth.get("secretName") or naming.check_name(cluster.name)
        _append_env(
            container,
            {
                "name": "RAY_AUTH_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": secret, "key": "auth_token"}},
            },
        )


def _tls_enabled(cluster: RayCluster, options: RenderOptions) -> bool:
    tls = cluster.spec.get("tlsOptions") or {}
    return options.gate("RayClusterMTLS") and tls.get("enabled") is True


def _apply_tls(container: Manifest) -> None:
    for name, value in _TLS_ENV:
        _set_env(container, name, value)
    if not _has_mount(container, name="ray-tls", path=TLS_DIR):
        _append_mount(container, {"name": "ray-tls", "mountPath": TLS_DIR, "readOnly": True})


def _tls_wait_container(ray: Manifest) -> Manifest:
    container: Manifest = {"name": "wait-for-tls-ip-san", "image": ray.get("image")}
    if ray.get("imagePullPolicy"):
        container["imagePullPolicy"] = ray["imagePullPolicy"]
    if ray.get("securityContext") is not None:
        container["securityContext"] = clone(ray["securityContext"])
    container["command"] = ["sh", "-c"]
    container["args"] = [_TLS_WAIT_SCRIPT]
    container["env"] = [_field_env("POD_IP", "status.podIP")]
    container["volumeMounts"] = [{"name": "ray-tls", "mountPath": TLS_DIR, "readOnly": True}]
    container["resources"] = _fixed_resources("50m", "64Mi")
    return container


def _fixed_resources(cpu: str, memory: str) -> Manifest:
    return {"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": cpu, "memory": memory}}


def _apply_head_ft(
    cluster: RayCluster, pod: Manifest, ray: Manifest, params: dict[str, str]
) -> None:
    annotations = pod["metadata"].setdefault("annotations", {})
    annotations[naming.ANN_FT_ENABLED] = "true" if cluster.ft_enabled else "false"
    if not cluster.ft_enabled:
        return
    options = cluster.spec.get("gcsFaultToleranceOptions")
    if cluster.ft_backend == "rocksdb":
        assert options is not None  # the legacy annotation always means Redis
        storage = options.get("storage") or {}
        _set_env(ray, "RAY_gcs_storage", "rocksdb")
        _set_env(ray, "RAY_gcs_storage_path", GCS_DIR)
        mount: Manifest = {"name": "gcs-storage", "mountPath": GCS_DIR}
        if storage.get("subPath"):
            mount["subPath"] = storage["subPath"]
        _append_mount(ray, mount)
        claim = storage.get("claimName") or naming.gcs_pvc_name(cluster.name)
        _add_volume(
            pod["spec"], {"name": "gcs-storage", "persistentVolumeClaim": {"claimName": claim}}
        )
        return
    if options is not None:
        namespace = options.get("externalStorageNamespace") or ""
    else:
        namespace = cluster.annotations.get(naming.ANN_STORAGE_NS, "")
    # KubeRay's fallback is the RayCluster UID, unknown here: ours is `<NS>/<C>` (README).
    namespace = namespace or naming.default_storage_namespace(cluster.namespace, cluster.name)
    annotations[naming.ANN_STORAGE_NS] = namespace
    _set_env(ray, "RAY_external_storage_namespace", namespace)
    if options is None:
        if "redis-password" in params and not _has_env(ray, "REDIS_PASSWORD"):
            _set_env(ray, "REDIS_PASSWORD", params["redis-password"])
        return
    _set_env(ray, "RAY_REDIS_ADDRESS", str(options.get("redisAddress") or ""), if_absent=False)
    for field, env, param in (
        ("redisUsername", "REDIS_USERNAME", "redis-username"),
        ("redisPassword", "REDIS_PASSWORD", "redis-password"),
    ):
        source = options.get(field)
        if source is None:
            continue
        entry: Manifest = {"name": env}
        if "value" in source:
            entry["value"] = source["value"]
        if "valueFrom" in source:
            entry["valueFrom"] = clone(source["valueFrom"])
        _append_env(ray, entry, if_absent=False)
        params[param] = f"${env}"


# --- the history-server collector (gate RayClusterHistoryServer) ----------------------------


def _collector_options(cluster: RayCluster, options: RenderOptions) -> Manifest | None:
    if not options.gate("RayClusterHistoryServer"):
        return None
    history = cluster.spec.get("historyServerOptions") or {}
    collector: Manifest | None = history.get("collectorOptions")
    return collector


def _collector_container(
    cluster: RayCluster,
    options: RenderOptions,
    collector: Manifest,
    pod_spec: Manifest,
    *,
    head: bool,
) -> Manifest:
    """`ray-history-collector` (§2.15): fixed env, the user's env, token auth, `ray-logs`."""
    container: Manifest = {
        "name": _COLLECTOR,
        "image": collector.get("image"),
        "imagePullPolicy": collector.get("imagePullPolicy") or "IfNotPresent",
        "resources": clone(collector.get("resources"))
        or {
            "limits": {"cpu": "200m", "memory": "256Mi"},
            "requests": {"cpu": "50m", "memory": "64Mi"},
        },
    }
    env = [
        _field_env("POD_IP", "status.podIP"),
        {"name": "RAY_CLUSTER_NAME", "value": cluster.name},
        {"name": "RAY_CLUSTER_NAMESPACE", "value": cluster.namespace},
        {"name": "RAY_ROLE", "value": "Head" if head else "Worker"},
        {"name": "EVENTS_PORT", "value": "8084"},
        {"name": "FQ_RAY_IP", "value": cluster.fqdn(options)},
    ]
    # Each from the RayCluster's own label, when non-empty (KubeRay reads the labels, which
    # RayJob and RayService set on the clusters they create).
    for env_name, label in (
        ("OWNER_KIND", naming.RAY_ORIGIN_CRD),
        ("OWNER_NAME", naming.RAY_ORIGIN_NAME),
    ):
        if cluster.labels.get(label):
            env.append({"name": env_name, "value": str(cluster.labels[label])})
    user_env = clone(collector.get("env") or [])
    if head and not any(e.get("name") == "RAY_DASHBOARD_ADDRESS" for e in user_env):
        env.append({"name": "RAY_DASHBOARD_ADDRESS", "value": "http://localhost:8265"})
    container["env"] = env + user_env
    # The collector queries the dashboard, so it gets the Ray container's credentials (§2.13),
    # after the user's env; then BuildPod mounts the shared log volume (§2.10).
    _apply_token_auth(cluster, pod_spec, container)
    _append_mount(container, {"name": "ray-logs", "mountPath": "/tmp/ray"})
    return container


# --- the autoscaler sidecar (enableInTreeAutoscaling) -------------------------------------


def _autoscaler_container(
    cluster: RayCluster, pod_spec: Manifest, ray: Manifest, options: RenderOptions
) -> Manifest:
    """KubeRay's `autoscaler` container (§2.12), running the project's wrapper.

    The wrapper takes the place of `ray kuberay-autoscaler` (reference autoscaling.md §5.1);
    `KUBERAY_GEN_AUTOSCALER_START_CMD` holds it, so a user `command`/`args` that runs the
    variable (KubeRay's documented override) runs the wrapper too.
    """
    command = autoscaling.wrapper_command(cluster)
    container: Manifest = {
        "name": "autoscaler",
        "image": ray.get("image"),
        "imagePullPolicy": "IfNotPresent",
        "env": [
            _field_env("RAY_CLUSTER_NAME", "metadata.labels['ray.io/cluster']"),
            _field_env("RAY_CLUSTER_NAMESPACE", "metadata.namespace"),
            _field_env("RAY_HEAD_POD_NAME", "metadata.name"),
            {"name": "KUBERAY_CRD_VER", "value": "v1"},
            {"name": "KUBERAY_GEN_AUTOSCALER_START_CMD", "value": command},
            {"name": "PYTHONPATH", "value": autoscaling.CONFIG_DIR},
        ],
        "command": ["/bin/bash", "-cl" if options.login_shell else "-c", "--"],
        "args": [command],
        "resources": _fixed_resources("500m", "512Mi"),
    }
    _apply_token_auth(cluster, pod_spec, container)
    if _tls_enabled(cluster, options):
        _apply_tls(container)
    overrides = cluster.spec.get("autoscalerOptions") or {}
    for key in ("resources", "image", "imagePullPolicy", "securityContext"):
        if overrides.get(key) is not None:
            container[key] = clone(overrides[key])
    for key in ("env", "envFrom", "volumeMounts"):
        if overrides.get(key):
            container[key] = [*(container.get(key) or []), *clone(overrides[key])]
    for key in ("command", "args"):
        if overrides.get(key):
            container[key] = clone(overrides[key])
    return container


def _apply_autoscaling(
    cluster: RayCluster,
    pod: Manifest,
    ray: Manifest,
    params: dict[str, str],
    options: RenderOptions,
) -> Manifest | None:
    """§2.1 step 6: no monitor in the Ray container, the head's SA, the sidecar, v2's env."""
    if not cluster.autoscaling:
        return None
    spec = pod["spec"]
    params["no-monitor"] = "true"
    spec["serviceAccountName"] = autoscaling.service_account_name(cluster)
    container = _autoscaler_container(cluster, spec, ray, options)
    spec["containers"].append(container)
    if cluster.autoscaler_version == "v2":
        _set_env(ray, "RAY_enable_autoscaler_v2", "true", if_absent=False)
        spec["restartPolicy"] = "Never"
    return container


def _mount_autoscaling(cluster: RayCluster, pod_spec: Manifest, container: Manifest) -> None:
    """The two mounts of the sidecar: KubeRay's shared `ray-logs`, then the rendered config."""
    if not _has_mount(container, path="/tmp/ray"):
        _append_mount(container, {"name": "ray-logs", "mountPath": "/tmp/ray"})
    _add_volume(
        pod_spec,
        {
            "name": autoscaling.CONFIG_VOLUME,
            "configMap": {"name": autoscaling.configmap_name(cluster.name)},
        },
    )
    _append_mount(
        container,
        {"name": autoscaling.CONFIG_VOLUME, "mountPath": autoscaling.CONFIG_DIR, "readOnly": True},
    )


# --- the shared pieces of head and worker pods ----------------------------------------------


def _labels(
    cluster: RayCluster, template_meta: Manifest, group_labels: Manifest, node_type: str, group: str
) -> dict[str, str]:
    labels: dict[str, str] = {
        naming.RAY_IS_RAY_NODE: "yes",
        naming.RAY_IDENTIFIER: naming.identifier(cluster.name, node_type),
        naming.APP_NAME: naming.KUBERAY_APP,
        naming.APP_CREATED_BY: naming.KUBERAY_OPERATOR,
    }
    labels.update(template_meta.get("labels") or {})
    labels.update({str(k): str(v) for k, v in (group_labels or {}).items()})
    labels.update(
        {naming.RAY_CLUSTER: cluster.name, naming.RAY_NODE_TYPE: node_type, naming.RAY_GROUP: group}
    )
    # KubeRay labels RayService pods `ray.io/serve` and flips the label with proxy health.
    # Git must not declare a label the syncer changes (DESIGN §1), so it is left to the syncer.
    labels.update(cluster.extra_pod_labels)
    labels.update(cluster.source_labels)
    return labels


def _shared_memory(pod_spec: Manifest, ray: Manifest, params: dict[str, str]) -> None:
    if "plasma-directory" in params or _has_mount(ray, path="/dev/shm"):
        return
    resources = ray.get("resources") or {}
    size = (resources.get("limits") or {}).get("memory") or (resources.get("requests") or {}).get(
        "memory"
    )
    empty_dir: Manifest = {"medium": "Memory"}
    if size is not None:
        empty_dir["sizeLimit"] = size
    _add_volume(pod_spec, {"name": "shared-mem", "emptyDir": empty_dir})
    _append_mount(ray, {"name": "shared-mem", "mountPath": "/dev/shm"})


def _command(
    cluster: RayCluster, pod: Manifest, ray: Manifest, ray_start: str, options: RenderOptions
) -> None:
    elements = [*(ray.get("command") or []), *(ray.get("args") or [])]
    cmd = "".join(f" {e} " for e in elements)
    annotations = pod["metadata"].get("annotations") or {}
    if str(annotations.get(naming.ANN_OVERWRITE_CMD, "")).lower() == "true" or "ray start" in cmd:
        return
    start = ray_start if cluster.start_wrapper is None else cluster.start_wrapper(ray_start)
    generated = ULIMIT + start
    ray["command"] = ["/bin/bash", "-cl" if options.login_shell else "-c", "--"]
    ray["args"] = [generated if not cmd else f"{cmd} && {generated}"]


def _ray_env(
    cluster: RayCluster,
    ray: Manifest,
    ray_start: str,
    options: RenderOptions,
    *,
    head: bool,
    collector: bool,
) -> None:
    fqdn = cluster.fqdn(options)
    port = cluster.head_port
    if not head:
        _set_env(ray, "FQ_RAY_IP", fqdn, if_absent=False)
        _set_env(ray, "RAY_IP", cluster.head_service_name, if_absent=False)
    _append_env(
        ray, _field_env("RAY_CLUSTER_NAME", "metadata.labels['ray.io/cluster']"), if_absent=False
    )
    _append_env(ray, _field_env("RAY_CLUSTER_NAMESPACE", "metadata.namespace"), if_absent=False)
    _append_env(ray, _field_env("RAY_CLOUD_INSTANCE_ID", "metadata.name"), if_absent=False)
    _append_env(
        ray, _field_env("RAY_NODE_TYPE_NAME", "metadata.labels['ray.io/group']"), if_absent=False
    )
    _set_env(ray, "KUBERAY_GEN_RAY_START_CMD", ray_start, if_absent=False)
    _set_env(ray, "RAY_PORT", port)
    if cluster.creator == "RayService":
        _set_env(ray, "RAY_timeout_ms_task_wait_for_death_info", "0")
        _set_env(ray, "RAY_gcs_server_request_timeout_seconds", "5")
        _set_env(ray, "RAY_SERVE_KV_TIMEOUT_S", "5")
    _set_env(ray, "RAY_ADDRESS", f"127.0.0.1:{port}" if head else f"{fqdn}:{port}")
    _set_env(ray, "RAY_USAGE_STATS_KUBERAY_IN_USE", "1")
    if head:
        crd = cluster.creator if cluster.creator in ("RayJob", "RayService") else "RayCluster"
        tags = f"kuberay_version={options.kuberay_version};kuberay_crd={crd}"
        _set_env(ray, "RAY_USAGE_STATS_EXTRA_TAGS", tags, if_absent=False)
    _set_env(ray, "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "1")
    if collector:
        _set_env(ray, "RAY_enable_ray_event", "true")
        _set_env(ray, "RAY_enable_core_worker_ray_event_to_aggregator", "true")
        _set_env(
            ray,
            "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR",
            "http://localhost:8084/v1/events",
        )
        _set_env(ray, "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES", _EVENT_TYPES)
        _set_env(
            ray,
            "RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISHER_HTTP_ENDPOINT_EXPOSABLE_EVENT_TYPES",
            _EVENT_TYPES,
        )


def _probes(
    cluster: RayCluster,
    ray: Manifest,
    params: dict[str, str],
    options: RenderOptions,
    *,
    head: bool,
) -> None:
    if not options.probes_injection:
        return
    agent = startparams.port_param(params, "dashboard-agent-listen-port", DEFAULT_AGENT_PORT)
    dashboard = startparams.port_param(params, "dashboard-port", DEFAULT_DASHBOARD_PORT)
    raylet = (
        f"wget --tries 1 -T 2 -q -O- http://localhost:{agent}/api/local_raylet_healthz"
        " | grep success"
    )
    gcs = f"wget --tries 1 -T 10 -q -O- http://localhost:{dashboard}/api/gcs_healthz | grep success"
    exec_check = f"{raylet} && {gcs}" if head else raylet
    timeout = 5 if head else 2
    http = at_least(str(cluster.spec.get("rayVersion") or ""), "2.53.0")

    def handler(command: str) -> Manifest:
        if http:
            return {"httpGet": {"path": "/api/healthz", "port": agent}}
        return {"exec": {"command": ["bash", "-c", command]}}

    if ray.get("livenessProbe") is None:
        ray["livenessProbe"] = {
            **handler(exec_check),
            "initialDelaySeconds": 30,
            "timeoutSeconds": timeout,
            "periodSeconds": 5,
            "successThreshold": 1,
            "failureThreshold": 120,
        }
    if ray.get("readinessProbe") is None:
        readiness: Manifest = {
            **handler(exec_check),
            "initialDelaySeconds": 10,
            "timeoutSeconds": timeout,
            "periodSeconds": 5,
            "successThreshold": 1,
            "failureThreshold": 10,
        }
        if cluster.creator == "RayService" and not head:
            serve = next(
                (
                    p.get("containerPort")
                    for p in ray.get("ports") or []
                    if p.get("name") == "serve"
                ),
                DEFAULT_SERVE_PORT,
            )
            serve_check = (
                f"wget --tries 1 -T 10 -q -O- http://localhost:{serve}/-/healthz | grep success"
            )
            readiness = {
                **readiness,
                "exec": {"command": ["bash", "-c", f"{raylet} && {serve_check}"]},
                "failureThreshold": 1,
            }
            readiness.pop("httpGet", None)
        ray["readinessProbe"] = readiness


def _metrics_port(ray: Manifest) -> None:
    ports = ray.setdefault("ports", [])
    if not any(p.get("name") == "metrics" for p in ports):
        ports.append({"name": "metrics", "containerPort": METRICS_PORT})


def _finish(
    cluster: RayCluster,
    pod: Manifest,
    params: dict[str, str],
    options: RenderOptions,
    *,
    head: bool,
    collector: bool,
    logs: bool = False,
) -> None:
    """Steps shared by head and worker from /dev/shm onwards (§2.1 steps 14-18)."""
    spec = pod["spec"]
    ray = spec["containers"][0]
    _shared_memory(spec, ray, params)
    if collector or logs:
        _add_volume(spec, {"name": "ray-logs", "emptyDir": {}})
        if not _has_mount(ray, path="/tmp/ray"):
            _append_mount(ray, {"name": "ray-logs", "mountPath": "/tmp/ray"})
    ray_start = startparams.start_command(params, head=head)
    _command(cluster, pod, ray, ray_start, options)
    fqdn = cluster.fqdn(options)
    for init in spec.get("initContainers") or []:
        _set_env(init, "FQ_RAY_IP", fqdn, if_absent=False)
        _set_env(init, "RAY_IP", cluster.head_service_name, if_absent=False)
    _ray_env(cluster, ray, ray_start, options, head=head, collector=collector)
    _probes(cluster, ray, params, options, head=head)
    if cluster.restart_policy is not None:
        spec["restartPolicy"] = cluster.restart_policy


def _start(cluster: RayCluster, template: Manifest) -> Manifest:
    pod: Manifest = {"apiVersion": "v1", "kind": "Pod"}
    body = clone(template)
    meta = body.get("metadata") or {}
    pod["metadata"] = {
        "name": "",
        "namespace": cluster.namespace,
        **({"annotations": dict(meta["annotations"])} if meta.get("annotations") else {}),
    }
    pod["spec"] = body.get("spec") or {}
    return pod


def _overwrite_annotation(cluster: RayCluster, pod: Manifest) -> None:
    if cluster.overwrite_command:
        pod["metadata"].setdefault("annotations", {})[naming.ANN_OVERWRITE_CMD] = "true"


def _params(group: Manifest) -> dict[str, str]:
    return {str(k): str(v) for k, v in (group.get("rayStartParams") or {}).items()}


# --- the head ------------------------------------------------------------------------------


def build_head_pod(cluster: RayCluster, options: RenderOptions) -> Manifest:
    """Build the head Pod (§2.1), named `<c>-head-<hash of the pod>`."""
    head = cluster.head
    template = head["template"]
    pod = _start(cluster, template)
    spec = pod["spec"]
    ray = spec["containers"][0]
    params = _params(head)
    startparams.apply_group_resources(params, head.get("resources"))
    startparams.apply_group_labels(params, head.get("labels"))
    pod["metadata"]["labels"] = _labels(
        cluster, template.get("metadata") or {}, head.get("labels") or {}, "head", naming.HEAD_GROUP
    )
    params["block"] = "true"
    params.setdefault("dashboard-host", "0.0.0.0")
    params.setdefault("metrics-export-port", str(METRICS_PORT))
    params.setdefault("dashboard-agent-listen-port", str(DEFAULT_AGENT_PORT))
    _overwrite_annotation(cluster, pod)
    autoscaler = _apply_autoscaling(cluster, pod, ray, params, options)
    _apply_head_ft(cluster, pod, ray, params)
    startparams.apply_container_resources(params, ray)
    _metrics_port(ray)
    _apply_token_auth(cluster, spec, ray)
    tls = _tls_enabled(cluster, options)
    if tls:
        _add_volume(
            spec, {"name": "ray-tls", "secret": {"secretName": f"ray-head-secret-{cluster.name}"}}
        )
        _apply_tls(ray)
        spec["initContainers"] = [_tls_wait_container(ray), *(spec.get("initContainers") or [])]
    collector = _collector_options(cluster, options)
    if collector is not None:
        spec["containers"].append(
            _collector_container(cluster, options, collector, spec, head=True)
        )
    _finish(
        cluster,
        pod,
        params,
        options,
        head=True,
        collector=collector is not None,
        logs=autoscaler is not None,
    )
    if autoscaler is not None:
        _mount_autoscaling(cluster, spec, autoscaler)
    pod["metadata"].setdefault("annotations", {})[naming.ANN_KUBERAY_VERSION] = (
        options.kuberay_version
    )
    template_hash = naming.content_hash(pod)
    pod["metadata"]["labels"][naming.TEMPLATE_HASH] = template_hash
    pod["metadata"]["name"] = naming.head_pod_name(cluster.name, template_hash)
    shape.annotate(cluster, pod)  # not hashed: scaling a group changes it in place
    return pod


# --- workers -------------------------------------------------------------------------------


def _wait_gcs_container(cluster: RayCluster, ray: Manifest, options: RenderOptions) -> Manifest:
    address = f"{cluster.fqdn(options)}:{cluster.head_port}"
    container: Manifest = {"name": "wait-gcs-ready", "image": ray.get("image")}
    if ray.get("imagePullPolicy"):
        container["imagePullPolicy"] = ray["imagePullPolicy"]
    container["command"] = ["/bin/bash", "-cl" if options.login_shell else "-c", "--"]
    container["args"] = [_WAIT_GCS_SCRIPT.replace("{ADDR}", address)]
    if ray.get("securityContext") is not None:
        container["securityContext"] = clone(ray["securityContext"])
    if ray.get("env"):
        container["env"] = clone(ray["env"])
    if ray.get("volumeMounts"):
        container["volumeMounts"] = clone(ray["volumeMounts"])
    container["resources"] = _fixed_resources("200m", "256Mi")
    return container


def build_worker_pod_template(
    cluster: RayCluster, group: WorkerGroup, options: RenderOptions
) -> Manifest:
    """Build the pod every replica of `group` shares (§2.2), without name or replica labels."""
    spec_in = group.spec
    template = spec_in["template"]
    pod = _start(cluster, template)
    spec = pod["spec"]
    ray = spec["containers"][0]
    wait: Manifest | None = None
    if options.init_container_injection:
        wait = _wait_gcs_container(cluster, ray, options)
        spec["initContainers"] = [*(spec.get("initContainers") or []), wait]
    params = _params(spec_in)
    startparams.apply_group_resources(params, spec_in.get("resources"))
    startparams.apply_group_labels(params, spec_in.get("labels"))
    pod["metadata"]["labels"] = _labels(
        cluster, template.get("metadata") or {}, spec_in.get("labels") or {}, "worker", group.name
    )
    params["block"] = "true"
    params.setdefault("metrics-export-port", str(METRICS_PORT))
    params.setdefault("dashboard-agent-listen-port", str(DEFAULT_AGENT_PORT))
    params.setdefault("address", f"{cluster.fqdn(options)}:{cluster.head_port}")
    _overwrite_annotation(cluster, pod)
    if cluster.ft_enabled:
        _set_env(ray, "RAY_gcs_rpc_server_reconnect_timeout_s", "600")
    startparams.apply_container_resources(params, ray)
    _metrics_port(ray)
    _apply_token_auth(cluster, spec, ray)
    if wait is not None:
        _apply_token_auth(cluster, spec, wait)
    if _tls_enabled(cluster, options):
        _add_volume(
            spec, {"name": "ray-tls", "secret": {"secretName": f"ray-worker-secret-{cluster.name}"}}
        )
        _apply_tls(ray)
        if wait is not None:
            _apply_tls(wait)
        spec["initContainers"] = [_tls_wait_container(ray), *(spec.get("initContainers") or [])]
    collector = _collector_options(cluster, options)
    if collector is not None:
        spec["containers"].append(
            _collector_container(cluster, options, collector, spec, head=False)
        )
    _finish(cluster, pod, params, options, head=False, collector=collector is not None)
    if cluster.autoscaling and cluster.autoscaler_version == "v2":
        spec["restartPolicy"] = "Never"
    return pod


def build_worker_pods(
    cluster: RayCluster, group: WorkerGroup, options: RenderOptions
) -> list[Manifest]:
    """Build every worker Pod of `group`: replicas times numOfHosts, with KubeRay's index labels."""
    count = group.pod_count
    if count == 0:
        return []
    base = build_worker_pod_template(cluster, group, options)
    template_hash = naming.content_hash(base)
    base["metadata"]["labels"][naming.TEMPLATE_HASH] = template_hash
    indexing = options.gate("RayMultiHostIndexing")
    pods: list[Manifest] = []
    for index in range(count):
        pod = clone(base)
        pod["metadata"]["name"] = naming.worker_pod_name(
            cluster.name, group.name, template_hash, index
        )
        labels = pod["metadata"]["labels"]
        if indexing:
            replica, host = divmod(index, group.num_of_hosts)
            labels[naming.RAY_REPLICA_INDEX] = str(replica)
            if group.num_of_hosts > 1:
                labels[naming.RAY_REPLICA_NAME] = naming.replica_name(
                    group.name, cluster.name, replica, template_hash
                )
                labels[naming.RAY_HOST_INDEX] = str(host)
        pods.append(pod)
    return pods


def build_autoscaled_template(
    cluster: RayCluster, group: WorkerGroup, options: RenderOptions
) -> Manifest:
    """The worker Pod the syncer creates for `group`, marked for the autoscaling ConfigMap.

    Exactly a rendered worker (the same `kuberay.io/pod-template-hash`) without its name and
    replica index, which the syncer gives each Pod it creates.
    """
    base = build_worker_pod_template(cluster, group, options)
    base["metadata"]["labels"][naming.TEMPLATE_HASH] = naming.content_hash(base)
    return autoscaling.mark_template(base, cluster)


def build_pods(cluster: RayCluster, options: RenderOptions) -> list[Manifest]:
    """All Pods of a cluster; none while it is suspended (§5.1)."""
    if cluster.suspended:
        return []
    pods = [build_head_pod(cluster, options)]
    for group in cluster.workers:
        if cluster.autoscaling:
            pods.append(build_autoscaled_template(cluster, group, options))
        else:
            pods.extend(build_worker_pods(cluster, group, options))
    return pods
