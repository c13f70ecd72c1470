"""Pod details the golden cases do not pin, each checked against raycluster.md §2 and §4."""

from __future__ import annotations

from typing import Any

import pytest

from renderer.model.raycluster import RayCluster, parse_raycluster
from renderer.objects import pods
from renderer.options import RenderOptions

Manifest = dict[str, Any]
OPTIONS = RenderOptions()
TOKEN_MOUNT = {
    "name": "ray-token",
    "mountPath": "/var/run/secrets/ray.io/serviceaccount",
    "readOnly": True,
}


def container(**extra: Any) -> Manifest:
    return {"name": "ray", "image": "rayproject/ray:2.55.0", **extra}


def cluster(
    head: Manifest | None = None,
    *,
    workers: int = 0,
    worker: Manifest | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> RayCluster:
    body: Manifest = {
        "rayVersion": spec.pop("rayVersion", "2.55.0"),
        "headGroupSpec": {
            "rayStartParams": spec.pop("headParams", {}),
            "template": {"spec": {"containers": [head or container()]}},
        },
        "workerGroupSpecs": [
            {
                "groupName": "g",
                "replicas": workers,
                "template": {"spec": {"containers": [worker or container()]}},
            }
        ],
        **spec,
    }
    return parse_raycluster("c", "ns", body, annotations=annotations, labels=labels)


def head_pod(c: RayCluster, options: RenderOptions = OPTIONS) -> Manifest:
    return pods.build_head_pod(c, options)


def worker_pod(c: RayCluster, options: RenderOptions = OPTIONS) -> Manifest:
    return pods.build_worker_pods(c, c.workers[0], options)[0]


def env(c: Manifest) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env") or []}


def env_names(c: Manifest) -> list[str]:
    return [e["name"] for e in c.get("env") or []]


# --- token authentication (§2.13, §2.10 ray-token) ---------------------------------------------

K8S_AUTH = {"mode": "token", "enableK8sTokenAuth": True}


def test_k8s_token_auth_mounts_a_projected_token_in_ray_and_wait_containers() -> None:
    # §2.13: RAY_ENABLE_K8S_TOKEN_AUTH=true and the ray-token mount, Pod volume added once;
    # "Applied to: the Ray container of every Pod, ..., the wait-gcs-ready init container".
    pod = worker_pod(cluster(workers=1, authOptions=K8S_AUTH))
    ray, wait = pod["spec"]["containers"][0], pod["spec"]["initContainers"][0]
    for c in (ray, wait):
        assert env(c)["RAY_AUTH_MODE"] == "token"
        assert env(c)["RAY_ENABLE_K8S_TOKEN_AUTH"] == "true"
        assert "RAY_AUTH_TOKEN" not in env(c)
        assert TOKEN_MOUNT in c["volumeMounts"]
    # §2.10: `projected: {sources: [{serviceAccountToken: {path: token}}]}` (no audience/expiry).
    tokens = [v for v in pod["spec"]["volumes"] if v["name"] == "ray-token"]
    assert tokens == [
        {
            "name": "ray-token",
            "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
        }
    ]


def test_k8s_token_auth_keeps_a_user_mount_named_ray_token() -> None:
    # §2.13: the mount is added "if no mount of that name".
    own = {"name": "ray-token", "mountPath": "/my/token"}
    ray = head_pod(cluster(container(volumeMounts=[own]), authOptions=K8S_AUTH))["spec"][
        "containers"
    ][0]
    assert [m for m in ray["volumeMounts"] if m["name"] == "ray-token"] == [own]


def test_token_auth_env_is_not_duplicated_when_the_user_sets_it() -> None:
    # §2.13: RAY_AUTH_MODE and RAY_AUTH_TOKEN are each added "if absent".
    own = [{"name": "RAY_AUTH_MODE", "value": "token"}, {"name": "RAY_AUTH_TOKEN", "value": "x"}]
    ray = head_pod(cluster(container(env=own), authOptions={"mode": "token", "secretName": "s"}))[
        "spec"
    ]["containers"][0]
    assert env_names(ray).count("RAY_AUTH_MODE") == 1
    assert env_names(ray).count("RAY_AUTH_TOKEN") == 1
    assert env(ray)["RAY_AUTH_TOKEN"] == "x"


def test_token_secret_defaults_to_checkname_of_the_cluster() -> None:
    # §2.13: secretKeyRef name `authOptions.secretName or CheckName(C)`, key auth_token.
    ray = head_pod(cluster(authOptions={"mode": "token"}))["spec"]["containers"][0]
    assert env(ray)["RAY_AUTH_TOKEN"] == {"secretKeyRef": {"name": "c", "key": "auth_token"}}


def test_auth_options_without_mode_token_inject_nothing() -> None:
    # §1.5.2 quirk: "an `authOptions: {}` with `mode` unset ... does not inject auth env vars".
    ray = head_pod(cluster(authOptions={}))["spec"]["containers"][0]
    assert not any(name.startswith("RAY_AUTH") for name in env_names(ray))


# --- the history-server collector (§2.15, §2.6 rows 17-21) -------------------------------------

HISTORY = {
    "collectorOptions": {
        "image": "collector:1",
        "imagePullPolicy": "Always",
        "resources": {"limits": {"cpu": "1"}},
        "env": [
            {"name": "STORAGE_BACKEND", "value": "GCS"},
            {"name": "GCS_BUCKET", "value": "b"},
            {"name": "RAY_DASHBOARD_ADDRESS", "value": "http://127.0.0.1:8266"},
        ],
    }
}
HISTORY_ON = OPTIONS.with_gates(RayClusterHistoryServer=True)


def collector(pod: Manifest) -> Manifest:
    found: list[Manifest] = [
        c for c in pod["spec"]["containers"] if c["name"] == "ray-history-collector"
    ]
    assert len(found) == 1
    return found[0]


def test_collector_needs_the_gate() -> None:
    c = cluster(historyServerOptions=HISTORY)
    assert [x["name"] for x in head_pod(c)["spec"]["containers"]] == ["ray"]


def test_collector_takes_user_pull_policy_resources_and_dashboard_address() -> None:
    # §2.15: pull policy and resources from collectorOptions when set; head only gets
    # RAY_DASHBOARD_ADDRESS=http://localhost:8265 "unless the user env has it".
    head = collector(head_pod(cluster(historyServerOptions=HISTORY), HISTORY_ON))
    assert head["imagePullPolicy"] == "Always"
    assert head["resources"] == {"limits": {"cpu": "1"}}
    assert env_names(head).count("RAY_DASHBOARD_ADDRESS") == 1
    assert env(head)["RAY_DASHBOARD_ADDRESS"] == "http://127.0.0.1:8266"
    assert env(head)["RAY_ROLE"] == "Head"


def test_collector_gets_token_auth_after_the_user_env_and_before_ray_logs() -> None:
    # §2.15 "token-auth env if enabled" (KubeRay adds it after building the container, so
    # after collectorOptions.env); §2.13 gives it the ray-token mount, BuildPod then ray-logs.
    c = cluster(workers=1, historyServerOptions=HISTORY, authOptions=K8S_AUTH)
    for pod in (head_pod(c, HISTORY_ON), worker_pod(c, HISTORY_ON)):
        sidecar = collector(pod)
        names = env_names(sidecar)
        assert names[-2:] == ["RAY_AUTH_MODE", "RAY_ENABLE_K8S_TOKEN_AUTH"]
        assert names.index("GCS_BUCKET") < names.index("RAY_AUTH_MODE")
        assert sidecar["volumeMounts"] == [
            TOKEN_MOUNT,
            {"name": "ray-logs", "mountPath": "/tmp/ray"},
        ]


def test_collector_uses_the_cluster_token_secret() -> None:
    c = cluster(historyServerOptions=HISTORY, authOptions={"mode": "token", "secretName": "tok"})
    sidecar = collector(head_pod(c, HISTORY_ON))
    assert env(sidecar)["RAY_AUTH_TOKEN"] == {"secretKeyRef": {"name": "tok", "key": "auth_token"}}


def test_collector_owner_env_comes_from_the_cluster_labels() -> None:
    # §2.15: OWNER_KIND / OWNER_NAME "from the RayCluster's ray.io/originated-from-crd /
    # ray.io/originated-from-cr-name labels, if non-empty" - each on its own.
    plain = collector(head_pod(cluster(historyServerOptions=HISTORY), HISTORY_ON))
    assert "OWNER_KIND" not in env(plain) and "OWNER_NAME" not in env(plain)
    labelled = cluster(
        historyServerOptions=HISTORY,
        labels={"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": ""},
    )
    sidecar = collector(head_pod(labelled, HISTORY_ON))
    assert env(sidecar)["OWNER_KIND"] == "RayJob"
    assert "OWNER_NAME" not in env(sidecar)
    both = cluster(
        historyServerOptions=HISTORY,
        labels={"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "j"},
    )
    names = env_names(collector(head_pod(both, HISTORY_ON)))
    assert names[names.index("FQ_RAY_IP") + 1 : names.index("FQ_RAY_IP") + 3] == [
        "OWNER_KIND",
        "OWNER_NAME",
    ]


def test_collector_event_env_on_the_ray_container_is_added_only_if_absent() -> None:
    # §2.6 rows 17-21: "each if absent".
    own = [{"name": "RAY_enable_ray_event", "value": "false"}]
    ray = head_pod(cluster(container(env=own), historyServerOptions=HISTORY), HISTORY_ON)["spec"][
        "containers"
    ][0]
    assert env_names(ray).count("RAY_enable_ray_event") == 1
    assert env(ray)["RAY_enable_ray_event"] == "false"
    assert env(ray)["RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR"] == (
        "http://localhost:8084/v1/events"
    )


def test_ray_container_already_mounting_tmp_ray_gets_no_second_log_mount() -> None:
    # §2.10 ray-logs: the mount is "skipped if that container already mounts /tmp/ray"; the
    # volume still comes, for the collector.
    own = {"name": "logs", "mountPath": "/tmp/ray"}
    pod = head_pod(cluster(container(volumeMounts=[own]), historyServerOptions=HISTORY), HISTORY_ON)
    ray = pod["spec"]["containers"][0]
    assert [m for m in ray["volumeMounts"] if m["mountPath"] == "/tmp/ray"] == [own]
    assert {"name": "ray-logs", "emptyDir": {}} in pod["spec"]["volumes"]


# --- mTLS init container (§2.9 wait-for-tls-ip-san, §2.14) -------------------------------------

TLS_ON = OPTIONS.with_gates(RayClusterMTLS=True)


def test_tls_wait_container_copies_image_pull_policy_and_security_context() -> None:
    # §2.9: "image / imagePullPolicy / securityContext: copied from the Ray container",
    # prepended before all other init containers, 50m/64Mi.
    security = {"runAsNonRoot": True}
    ray = container(imagePullPolicy="Always", securityContext=security)
    c = cluster(ray, workers=1, worker=ray, tlsOptions={"enabled": True})
    for pod in (head_pod(c, TLS_ON), worker_pod(c, TLS_ON)):
        first = pod["spec"]["initContainers"][0]
        assert first["name"] == "wait-for-tls-ip-san"
        assert first["image"] == "rayproject/ray:2.55.0"
        assert first["imagePullPolicy"] == "Always"
        assert first["securityContext"] == security
        assert first["securityContext"] is not security  # a copy, not shared
        assert first["resources"]["requests"] == {"cpu": "50m", "memory": "64Mi"}
    init = [i["name"] for i in worker_pod(c, TLS_ON)["spec"]["initContainers"]]
    assert init == ["wait-for-tls-ip-san", "wait-gcs-ready"]


def test_tls_wait_container_leaves_out_an_unset_pull_policy_and_security_context() -> None:
    first = head_pod(cluster(tlsOptions={"enabled": True}), TLS_ON)["spec"]["initContainers"][0]
    assert "imagePullPolicy" not in first and "securityContext" not in first


def test_tls_mount_is_skipped_when_the_path_is_already_mounted() -> None:
    # §2.14: "plus the ray-tls mount (skipped if a mount with that name or path exists)".
    own = {"name": "certs", "mountPath": "/etc/ray/tls"}
    ray = head_pod(cluster(container(volumeMounts=[own]), tlsOptions={"enabled": True}), TLS_ON)[
        "spec"
    ]["containers"][0]
    assert [m for m in ray["volumeMounts"] if m["mountPath"] == "/etc/ray/tls"] == [own]


# --- GCS fault tolerance, Redis (§4.2) ---------------------------------------------------------


def test_legacy_annotation_mode_takes_namespace_and_password_from_the_cluster() -> None:
    # §4.2: the storage namespace comes from the RayCluster annotation in legacy mode, onto the
    # head Pod annotation and RAY_external_storage_namespace; "KubeRay then adds env
    # REDIS_PASSWORD=<that value> if no REDIS_PASSWORD env exists".
    c = cluster(
        container(env=[{"name": "RAY_REDIS_ADDRESS", "value": "redis:6379"}]),
        annotations={"ray.io/ft-enabled": "True", "ray.io/external-storage-namespace": "prod"},
        headParams={"redis-password": "hunter2"},
    )
    pod = head_pod(c)
    assert pod["metadata"]["annotations"]["ray.io/ft-enabled"] == "true"
    assert pod["metadata"]["annotations"]["ray.io/external-storage-namespace"] == "prod"
    ray = pod["spec"]["containers"][0]
    assert env(ray)["RAY_external_storage_namespace"] == "prod"
    assert env(ray)["REDIS_PASSWORD"] == "hunter2"
    assert "--redis-password=hunter2" in env(ray)["KUBERAY_GEN_RAY_START_CMD"]


def test_legacy_mode_keeps_a_user_redis_password_env() -> None:
    own = [
        {"name": "RAY_REDIS_ADDRESS", "value": "redis:6379"},
        {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "r", "key": "p"}}},
    ]
    c = cluster(
        container(env=own),
        annotations={"ray.io/ft-enabled": "true"},
        headParams={"redis-password": "$REDIS_PASSWORD"},
    )
    ray = head_pod(c)["spec"]["containers"][0]
    assert env_names(ray).count("REDIS_PASSWORD") == 1
    assert env(ray)["REDIS_PASSWORD"] == {"secretKeyRef": {"name": "r", "key": "p"}}


def test_redis_options_with_literal_values() -> None:
    # §4.2: REDIS_USERNAME / REDIS_PASSWORD "with its value/valueFrom", and rayStartParams
    # `redis-username: $REDIS_USERNAME`, `redis-password: $REDIS_PASSWORD` (expanded by bash).
    c = cluster(
        gcsFaultToleranceOptions={
            "redisAddress": "redis:6379",
            "externalStorageNamespace": "ns1",
            "redisUsername": {"value": "ray"},
            "redisPassword": {"value": "pw"},
        }
    )
    ray = head_pod(c)["spec"]["containers"][0]
    names = env_names(ray)
    assert names[:4] == [
        "RAY_external_storage_namespace",
        "RAY_REDIS_ADDRESS",
        "REDIS_USERNAME",
        "REDIS_PASSWORD",
    ]
    assert env(ray)["REDIS_USERNAME"] == "ray" and env(ray)["REDIS_PASSWORD"] == "pw"
    command = env(ray)["KUBERAY_GEN_RAY_START_CMD"]
    assert " --redis-password=$REDIS_PASSWORD " in command
    assert " --redis-username=$REDIS_USERNAME " in command


# --- probe ports: Go's strconv.ParseInt(value, 10, 32) (§2.8) ----------------------------------


@pytest.mark.parametrize(
    ("value", "port"),
    [
        ("52366", 52366),
        ("+52366", 52366),  # ParseInt accepts a sign
        ("052366", 52366),
        ("abc", 52365),  # "a non-numeric value falls back to 52365"
        ("5_2366", 52365),  # Python's int() would accept these three; Go does not
        (" 52366", 52365),
        ("\uff15\uff12\uff13\uff16\uff16", 52365),  # full-width digits
        ("2147483648", 52365),  # beyond int32
        ("", 52365),
    ],
)
def test_probe_agent_port_is_parsed_like_go(value: str, port: int) -> None:
    ray = head_pod(cluster(headParams={"dashboard-agent-listen-port": value}))["spec"][
        "containers"
    ][0]
    assert ray["livenessProbe"]["httpGet"] == {"path": "/api/healthz", "port": port}


def test_exec_probe_uses_the_dashboard_port_param() -> None:
    # §2.8: `<dash>` = rayStartParams dashboard-port parsed, else 8265 (exec form below 2.53).
    c = cluster(rayVersion="2.52.0", headParams={"dashboard-port": "8266"})
    command = head_pod(c)["spec"]["containers"][0]["readinessProbe"]["exec"]["command"][2]
    assert command.endswith("http://localhost:8266/api/gcs_healthz | grep success")
