"""Pod construction checked against facts in the KubeRay reference (raycluster.md §2)."""

from __future__ import annotations

from typing import Any

import pytest

from renderer import naming
from renderer.model.raycluster import parse_raycluster
from renderer.objects import pods, startparams
from renderer.options import RenderOptions

Manifest = dict[str, Any]
OPTIONS = RenderOptions()


def container(limits: dict[str, Any] | None = None, **extra: Any) -> Manifest:
    result: Manifest = {"name": "ray", "image": "rayproject/ray:2.52.0", **extra}
    if limits is not None:
        result["resources"] = {"limits": limits}
    return result


def cluster_spec(
    head: Manifest | None = None, workers: list[Manifest] | None = None, **spec: Any
) -> Manifest:
    return {
        "rayVersion": spec.pop("rayVersion", "2.52.0"),
        "headGroupSpec": {"template": {"spec": {"containers": [head or container()]}}},
        "workerGroupSpecs": workers or [],
        **spec,
    }


def worker_group(name: str = "g", **fields: Any) -> Manifest:
    return {
        "groupName": name,
        "template": {"spec": {"containers": [container()]}},
        **fields,
    }


def start(params: dict[str, str], ray: Manifest, *, head: bool) -> str:
    params = dict(params)
    startparams.apply_container_resources(params, ray)
    return startparams.start_command(params, head=head)


# KubeRay pod_test.go TestGenerateRayStartCommand, as quoted in raycluster.md §2.4.2.
def test_gpu_limit_becomes_num_gpus() -> None:
    assert start({}, container({"nvidia.com/gpu": 1}), head=False) == "ray start  --num-gpus=1 "


def test_tpu_limit_becomes_tpu_resource() -> None:
    assert (
        start({}, container({"google.com/tpu": 4}), head=False)
        == "ray start  --resources='{\"TPU\":4}' "
    )


def test_first_accelerator_in_sorted_order_wins() -> None:
    limits = {"aws.amazon.com/neuroncore": 4, "nvidia.com/gpu": 1, "google.com/tpu": 8}
    assert (
        start({}, container(limits), head=True)
        == "ray start --head  --num-gpus=1  --resources='{\"neuron_cores\":4}' "
    )


def test_existing_resources_param_with_quotes_is_extended() -> None:
    params = {"resources": '"{"custom_resource":2}"'}
    limits = {"aws.amazon.com/neuroncore": 4}
    assert (
        start(params, container(limits), head=True)
        == 'ray start --head  --resources=\'{"custom_resource":2,"neuron_cores":4}\' '
    )


def test_escaped_resources_param_disables_gpu_inference() -> None:
    params = {"resources": '\'"{\\"Custom1\\": 1}"\''}
    command = start(params, container({"nvidia.com/gpu": 1}), head=False)
    assert "--num-gpus" not in command


@pytest.mark.parametrize(("cpu", "flag"), [("500m", "1"), ("1500m", "2"), ("2", "2"), (3, "3")])
def test_cpu_is_rounded_up(cpu: object, flag: str) -> None:
    assert start({}, container({"cpu": cpu}), head=False) == f"ray start  --num-cpus={flag} "


@pytest.mark.parametrize(
    ("memory", "flag"), [("1Gi", "1073741824"), ("5Gi", "5368709120"), ("500M", "500000000")]
)
def test_memory_limit_in_bytes(memory: str, flag: str) -> None:
    assert start({}, container({"memory": memory}), head=False) == f"ray start  --memory={flag} "


def test_memory_request_alone_is_ignored_but_cpu_request_counts() -> None:
    ray = container(resources={"requests": {"cpu": "2", "memory": "4Gi"}})
    assert start({}, ray, head=False) == "ray start  --num-cpus=2 "


def test_mig_profile_is_gpu_like() -> None:
    assert (
        start({}, container({"nvidia.com/mig-2g.32gb": 2}), head=False)
        == "ray start  --num-gpus=2 "
    )


def test_boolean_flags() -> None:
    params = {
        "block": "true",
        "disable-usage-stats": "False",
        "log-color": "true",
        "include-dashboard": "false",
    }
    assert (
        startparams.start_command(params, head=False)
        == "ray start  --block  --include-dashboard=false  --log-color=true "
    )


@pytest.mark.parametrize(
    ("resources", "flags"),
    [
        ({"CPU": "0"}, " --num-cpus=0 "),
        ({"GPU": "1"}, " --num-gpus=1 "),
        ({"custom": "3"}, " --resources='{\"custom\":3}' "),
        ({"memory": "1Gi", "half": "500m"}, " --memory=1073741824  --resources='{\"half\":0.5}' "),
    ],
)
def test_group_resources_field(resources: dict[str, str], flags: str) -> None:
    params: dict[str, str] = {}
    startparams.apply_group_resources(params, resources)
    assert startparams.start_command(params, head=False) == "ray start " + flags


def test_group_labels_are_sorted_and_joined() -> None:
    params: dict[str, str] = {}
    startparams.apply_group_labels(params, {"zone": "a", "accel": "none"})
    assert params == {"labels": "accel=none,zone=a"}


def test_head_command_runs_user_command_first() -> None:
    head = container(command=["echo 123"], args=["456"])
    cluster = parse_raycluster("c", "ns", cluster_spec(head))
    pod = pods.build_head_pod(cluster, OPTIONS)
    args = pod["spec"]["containers"][0]["args"]
    prefix = " echo 123  456  && ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; "
    assert args[0].startswith(prefix + "ray start --head  --block ")


def test_command_containing_ray_start_is_left_alone() -> None:
    head = container(command=["bash", "-c"], args=["ray start --head --block"])
    cluster = parse_raycluster("c", "ns", cluster_spec(head))
    ray = pods.build_head_pod(cluster, OPTIONS)["spec"]["containers"][0]
    assert ray["command"] == ["bash", "-c"]
    assert ray["args"] == ["ray start --head --block"]


def test_login_shell_option() -> None:
    cluster = parse_raycluster("c", "ns", cluster_spec(workers=[worker_group(replicas=1)]))
    options = RenderOptions(login_shell=True)
    worker = pods.build_worker_pods(cluster, cluster.workers[0], options)[0]
    assert worker["spec"]["containers"][0]["command"] == ["/bin/bash", "-cl", "--"]
    assert worker["spec"]["initContainers"][0]["command"] == ["/bin/bash", "-cl", "--"]


def env_names(ray: Manifest) -> list[str]:
    return [e["name"] for e in ray["env"]]


def test_head_env_order() -> None:
    cluster = parse_raycluster("c", "ns", cluster_spec())
    ray = pods.build_head_pod(cluster, OPTIONS)["spec"]["containers"][0]
    assert env_names(ray) == [
        "RAY_CLUSTER_NAME",
        "RAY_CLUSTER_NAMESPACE",
        "RAY_CLOUD_INSTANCE_ID",
        "RAY_NODE_TYPE_NAME",
        "KUBERAY_GEN_RAY_START_CMD",
        "RAY_PORT",
        "RAY_ADDRESS",
        "RAY_USAGE_STATS_KUBERAY_IN_USE",
        "RAY_USAGE_STATS_EXTRA_TAGS",
        "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE",
    ]


def test_rayservice_cluster_env_labels_and_worker_readiness() -> None:
    spec = cluster_spec(workers=[worker_group(replicas=1)], rayVersion="2.53.0")
    cluster = parse_raycluster("c", "ns", spec, creator="RayService")
    head = pods.build_head_pod(cluster, OPTIONS)
    worker = pods.build_worker_pods(cluster, cluster.workers[0], OPTIONS)[0]
    # ray.io/serve follows proxy health: the syncer sets it, git does not declare it.
    assert naming.RAY_SERVE not in head["metadata"]["labels"]
    assert naming.RAY_SERVE not in worker["metadata"]["labels"]
    names = env_names(head["spec"]["containers"][0])
    assert names[names.index("RAY_PORT") + 1 : names.index("RAY_ADDRESS")] == [
        "RAY_timeout_ms_task_wait_for_death_info",
        "RAY_gcs_server_request_timeout_seconds",
        "RAY_SERVE_KV_TIMEOUT_S",
    ]
    readiness = worker["spec"]["containers"][0]["readinessProbe"]
    assert readiness["failureThreshold"] == 1
    assert readiness["exec"]["command"][2].endswith(
        "&& wget --tries 1 -T 10 -q -O- http://localhost:8000/-/healthz | grep success"
    )
    # Liveness keeps the HTTP form for Ray >= 2.53.
    assert worker["spec"]["containers"][0]["livenessProbe"]["httpGet"] == {
        "path": "/api/healthz",
        "port": 52365,
    }


def test_user_env_is_kept_first_and_duplicates_are_appended() -> None:
    head = container(
        env=[{"name": "RAY_PORT", "value": "1"}, {"name": "RAY_CLUSTER_NAME", "value": "x"}]
    )
    cluster = parse_raycluster("c", "ns", cluster_spec(head))
    names = env_names(pods.build_head_pod(cluster, OPTIONS)["spec"]["containers"][0])
    assert names[:2] == ["RAY_PORT", "RAY_CLUSTER_NAME"]
    assert names.count("RAY_PORT") == 1  # "if absent"
    assert names.count("RAY_CLUSTER_NAME") == 2  # "always"


def test_replica_counts_clamp_to_min_and_max() -> None:
    spec = cluster_spec(
        workers=[
            worker_group("low", replicas=0, minReplicas=2, maxReplicas=5),
            worker_group("high", replicas=9, minReplicas=0, maxReplicas=3),
            worker_group("null", minReplicas=1, maxReplicas=3),
            worker_group("off", replicas=2, suspend=True),
        ]
    )
    cluster = parse_raycluster("c", "ns", spec)
    assert [g.pod_count for g in cluster.workers] == [2, 3, 1, 0]


def test_worker_names_are_stable_when_scaling() -> None:
    one = parse_raycluster("c", "ns", cluster_spec(workers=[worker_group(replicas=1)]))
    three = parse_raycluster("c", "ns", cluster_spec(workers=[worker_group(replicas=3)]))
    first = [p["metadata"]["name"] for p in pods.build_worker_pods(one, one.workers[0], OPTIONS)]
    more = [p["metadata"]["name"] for p in pods.build_worker_pods(three, three.workers[0], OPTIONS)]
    assert more[:1] == first
    assert len(set(more)) == 3


def test_template_change_renames_pods() -> None:
    a = parse_raycluster("c", "ns", cluster_spec(workers=[worker_group(replicas=1)]))
    changed = worker_group(replicas=1)
    changed["template"]["spec"]["containers"][0]["image"] = "rayproject/ray:2.53.0"
    b = parse_raycluster("c", "ns", cluster_spec(workers=[changed]))
    name_a = pods.build_worker_pods(a, a.workers[0], OPTIONS)[0]["metadata"]["name"]
    name_b = pods.build_worker_pods(b, b.workers[0], OPTIONS)[0]["metadata"]["name"]
    assert name_a != name_b


def test_long_names_fit_in_63_characters() -> None:
    name = "c" * 53
    spec = cluster_spec(workers=[worker_group("g" * 40, replicas=12)])
    cluster = parse_raycluster(name, "ns", spec)
    names = [p["metadata"]["name"] for p in pods.build_pods(cluster, OPTIONS)]
    assert all(len(n) <= 63 and naming.is_dns1123_subdomain(n) for n in names)
    assert len(set(names)) == len(names) == 13


def test_upper_case_group_names_are_lowered_in_pod_names_only() -> None:
    cluster = parse_raycluster("c", "ns", cluster_spec(workers=[worker_group("GPU", replicas=1)]))
    pod = pods.build_worker_pods(cluster, cluster.workers[0], OPTIONS)[0]
    assert pod["metadata"]["name"].startswith("c-gpu-worker-")
    assert pod["metadata"]["labels"][naming.RAY_GROUP] == "GPU"


def test_probe_injection_can_be_disabled_and_user_probes_are_kept() -> None:
    head = container(readinessProbe={"tcpSocket": {"port": 6379}})
    cluster = parse_raycluster("c", "ns", cluster_spec(head))
    ray = pods.build_head_pod(cluster, OPTIONS)["spec"]["containers"][0]
    assert ray["readinessProbe"] == {"tcpSocket": {"port": 6379}}
    assert "exec" in ray["livenessProbe"]
    bare = pods.build_head_pod(cluster, RenderOptions(probes_injection=False))["spec"][
        "containers"
    ][0]
    assert "livenessProbe" not in bare


def test_no_init_container_injection() -> None:
    cluster = parse_raycluster("c", "ns", cluster_spec(workers=[worker_group(replicas=1)]))
    worker = pods.build_worker_pods(
        cluster, cluster.workers[0], RenderOptions(init_container_injection=False)
    )[0]
    assert "initContainers" not in worker["spec"]


def test_custom_head_port_reaches_workers() -> None:
    spec = cluster_spec(workers=[worker_group(replicas=1)])
    spec["headGroupSpec"]["rayStartParams"] = {"port": "6380"}
    cluster = parse_raycluster("c", "ns", spec)
    worker = pods.build_worker_pods(cluster, cluster.workers[0], OPTIONS)[0]
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0]["env"]}
    assert env["RAY_ADDRESS"] == "c-head-svc.ns.svc.cluster.local:6380"
    assert "--address=c-head-svc.ns.svc.cluster.local:6380" in env["KUBERAY_GEN_RAY_START_CMD"]


def test_cluster_domain_option() -> None:
    cluster = parse_raycluster("c", "ns", cluster_spec())
    assert (
        cluster.fqdn(RenderOptions(cluster_domain="corp.example"))
        == "c-head-svc.ns.svc.corp.example"
    )
