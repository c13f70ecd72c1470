"""The RayService pipeline, its model and its Gateway objects (reference rayservice.md §3)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from renderer import compile as compiler
from renderer import naming, sources
from renderer.errors import ManifestError, format_path
from renderer.model import rayservice
from renderer.objects import gateway
from renderer.options import RenderOptions
from schemas import intent as contract
from tests.paths import SAMPLES
from tests.validation import validate_object

Manifest = dict[str, Any]
OPTIONS = RenderOptions()
SERVE_CONFIG = "applications:\n  - name: app\n    import_path: mod.app\n    route_prefix: /\n"
INCREMENTAL = "NewClusterWithIncrementalUpgrade"


def head_container(ports: list[Manifest] | None = None) -> Manifest:
    result: Manifest = {"name": "ray-head", "image": "rayproject/ray:2.52.0"}
    if ports is not None:
        result["ports"] = ports
    return result


def cluster_config(head_ports: list[Manifest] | None = None, **fields: Any) -> Manifest:
    return {
        "rayVersion": "2.52.0",
        "headGroupSpec": {"template": {"spec": {"containers": [head_container(head_ports)]}}},
        "workerGroupSpecs": [
            {
                "groupName": "small",
                "replicas": 2,
                "minReplicas": 1,
                "maxReplicas": 5,
                "template": {
                    "spec": {
                        "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.0"}]
                    }
                },
            }
        ],
        **fields,
    }


def rayservice_doc(
    config: Manifest | None = None, annotations: dict[str, str] | None = None, **spec: Any
) -> Manifest:
    metadata: Manifest = {"name": "fruit", "namespace": "serving"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": metadata,
        "spec": {
            "serveConfigV2": SERVE_CONFIG,
            "rayClusterConfig": config or cluster_config(),
            **spec,
        },
    }


def incremental_strategy(**options: Any) -> Manifest:
    upgrade = {"gatewayClassName": "istio", "stepSizePercent": 10, "intervalSeconds": 30}
    upgrade.update(options)
    return {"type": INCREMENTAL, "clusterUpgradeOptions": upgrade}


def compile_doc(
    doc: Manifest, options: RenderOptions = OPTIONS
) -> tuple[list[str], list[Manifest]]:
    problems, objects = compiler.compile_document(copy.deepcopy(doc), options)
    lines = [f"{p.severity}: {format_path(p.path)}: {p.message}" for p in problems]
    return lines, objects


def render(doc: Manifest, options: RenderOptions = OPTIONS) -> dict[tuple[str, str], Manifest]:
    lines, objects = compile_doc(doc, options)
    assert not [line for line in lines if line.startswith("error")], lines
    keyed = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(keyed) == len(objects), "two objects share a kind and name"
    return keyed


def generation_of(doc: Manifest) -> str:
    return rayservice.generation_name("fruit", doc["spec"]["rayClusterConfig"])


def intent(objects: dict[tuple[str, str], Manifest]) -> Manifest:
    data = objects[("ConfigMap", "fruit-kuberay-intent")]["data"][naming.INTENT_KEY]
    parsed: Manifest = json.loads(data)
    assert data == naming.canonical_json(parsed)
    return parsed


def matches(selector: dict[str, str], pod: Manifest) -> bool:
    labels = pod["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in selector.items())


def pods(objects: dict[tuple[str, str], Manifest]) -> list[Manifest]:
    return [o for (kind, _), o in objects.items() if kind == "Pod"]


def activated(pod: Manifest) -> Manifest:
    """The pod as the syncer leaves it once its generation is active and its proxy healthy."""
    result = copy.deepcopy(pod)
    result["metadata"]["labels"][naming.SERVE_ACTIVE] = "true"
    result["metadata"]["labels"][naming.RAY_SERVE] = "true"
    return result


# --- names and the generation hash -----------------------------------------------------------


def test_objects_carry_kuberay_and_generation_names():
    doc = rayservice_doc()
    gen = generation_of(doc)
    objects = render(doc)
    assert gen.startswith("fruit-")
    assert len(gen) == len("fruit-") + 5
    names = {key for key in objects if key[0] != "Pod"}
    assert names == {
        ("Service", "fruit-head-svc"),
        ("Service", "fruit-serve-svc"),
        ("Service", f"{gen}-head-svc"),
        ("ConfigMap", f"{gen}-serve-config"),
        ("ConfigMap", "fruit-kuberay-intent"),
    }
    assert {p["metadata"]["labels"][naming.RAY_CLUSTER] for p in pods(objects)} == {gen}
    assert len(pods(objects)) == 3  # the head and 2 workers


def test_generation_name_fits_kuberay_cluster_name_limit():
    doc = rayservice_doc()
    doc["metadata"]["name"] = "s" * 47
    gen = rayservice.generation_name("s" * 47, doc["spec"]["rayClusterConfig"])
    assert len(gen) == 53
    objects = render(doc)
    assert ("ConfigMap", f"{gen}-serve-config") in objects
    assert all(len(p["metadata"]["name"]) <= 63 for p in pods(objects))
    assert all(len(name) <= 63 for kind, name in objects if kind == "Service")


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["workerGroupSpecs"][0].update(replicas=4),
        lambda c: c["workerGroupSpecs"][0].update(minReplicas=0, maxReplicas=10),
        lambda c: c["workerGroupSpecs"][0].update(scaleStrategy={"workersToDelete": ["p"]}),
        lambda c: c["workerGroupSpecs"][0]["template"]["spec"].update(
            tolerations=[{"key": "gpu", "operator": "Exists"}]
        ),
        lambda c: c["headGroupSpec"]["template"]["spec"].update(
            schedulingGates=[{"name": "example.com/wait"}]
        ),
        lambda c: c.update(suspend=False),
        lambda c: c.update(upgradeStrategy={"type": "None"}),
    ],
    ids=[
        "replicas",
        "min-max",
        "workers-to-delete",
        "worker-tolerations",
        "head-scheduling-gates",
        "suspend",
        "cluster-upgrade-strategy",
    ],
)
def test_hash_ignores_what_kuberay_hash_ignores(change):
    config = cluster_config()
    changed = copy.deepcopy(config)
    change(changed)
    assert changed != config
    assert rayservice.generation_hash(changed) == rayservice.generation_hash(config)


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["headGroupSpec"]["template"]["spec"]["containers"][0].update(
            image="rayproject/ray:2.53.0"
        ),
        lambda c: c["workerGroupSpecs"][0].update(rayStartParams={"num-cpus": "2"}),
        lambda c: c["workerGroupSpecs"][0].update(groupName="large"),
        lambda c: c.update(rayVersion="2.53.0"),
        lambda c: c["workerGroupSpecs"].append(copy.deepcopy(c["workerGroupSpecs"][0])),
    ],
    ids=["image", "ray-start-params", "group-name", "ray-version", "new-group"],
)
def test_hash_changes_with_the_cluster_config(change):
    config = cluster_config()
    changed = copy.deepcopy(config)
    change(changed)
    assert rayservice.generation_hash(changed) != rayservice.generation_hash(config)


def test_hash_does_not_modify_the_config():
    config = cluster_config()
    config["workerGroupSpecs"][0]["scaleStrategy"] = {"workersToDelete": ["x"]}
    before = copy.deepcopy(config)
    rayservice.generation_hash(config)
    assert config == before


def test_replica_change_keeps_the_generation_and_scales_its_pods():
    doc = rayservice_doc()
    scaled = copy.deepcopy(doc)
    scaled["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = 3
    before, after = render(doc), render(scaled)
    assert generation_of(doc) == generation_of(scaled)
    assert len(pods(after)) == len(pods(before)) + 1
    assert set(before) < set(after)


def test_serve_config_only_change_keeps_the_generation_and_changes_only_the_config_maps():
    doc = rayservice_doc()
    changed = copy.deepcopy(doc)
    changed["spec"]["serveConfigV2"] = SERVE_CONFIG.replace("mod.app", "mod.app2")
    before, after = render(doc), render(changed)
    gen = generation_of(doc)
    assert generation_of(changed) == gen
    assert set(before) == set(after)
    differing = {key for key in before if before[key] != after[key]}
    assert differing == {
        ("ConfigMap", f"{gen}-serve-config"),
        ("ConfigMap", "fruit-kuberay-intent"),
    }
    serve_config = after[("ConfigMap", f"{gen}-serve-config")]["data"]["serveConfigV2"]
    assert serve_config == changed["spec"]["serveConfigV2"]


def test_cluster_config_change_gives_a_new_generation():
    doc = rayservice_doc()
    changed = copy.deepcopy(doc)
    changed["spec"]["rayClusterConfig"]["rayVersion"] = "2.53.0"
    before, after = render(doc), render(changed)
    old, new = generation_of(doc), generation_of(changed)
    assert old != new
    assert ("ConfigMap", f"{new}-serve-config") in after
    assert not [key for key in after if old in key[1]]
    # The RayService-level objects keep their names, so traffic keeps flowing during the switch.
    for key in [("Service", "fruit-head-svc"), ("Service", "fruit-serve-svc")]:
        assert before[key]["spec"]["selector"] == after[key]["spec"]["selector"]


# --- the serve config --------------------------------------------------------------------------


def test_serve_config_map_holds_the_config_verbatim_and_as_json():
    objects = render(rayservice_doc())
    config_map = objects[("ConfigMap", f"{generation_of(rayservice_doc())}-serve-config")]
    assert config_map["data"]["serveConfigV2"] == SERVE_CONFIG
    assert json.loads(config_map["data"]["serveConfigV2.json"]) == {
        "applications": [{"name": "app", "import_path": "mod.app", "route_prefix": "/"}]
    }
    assert config_map["metadata"]["labels"][naming.ROLE] == contract.ROLE_SERVE_CONFIG


def test_invalid_serve_config_yaml_is_an_error():
    lines, objects = compile_doc(rayservice_doc(serveConfigV2="applications: [\n"))
    assert objects == []
    assert len(lines) == 1
    assert lines[0].startswith(
        "error: $.spec.serveConfigV2: serveConfigV2 is not valid YAML at line"
    )


def test_serve_config_that_is_not_a_mapping_is_an_error():
    lines, objects = compile_doc(rayservice_doc(serveConfigV2="- a\n- b\n"))
    assert objects == []
    assert lines == ["error: $.spec.serveConfigV2: serveConfigV2 must be a YAML mapping, got list"]


def test_empty_serve_config_is_a_warning_and_renders():
    doc = rayservice_doc()
    del doc["spec"]["serveConfigV2"]
    lines, objects = compile_doc(doc)
    assert lines == [
        "warning: $.spec.serveConfigV2: serveConfigV2 is empty: no Serve application is deployed "
        "and the RayService never becomes ready; set serveConfigV2"
    ]
    config_map = next(o for o in objects if o["metadata"]["name"].endswith("-serve-config"))
    assert config_map["data"] == {"serveConfigV2": "", "serveConfigV2.json": "{}"}


# --- Services ----------------------------------------------------------------------------------


def test_serve_service_selects_serving_pods_of_the_active_generation_only():
    objects = render(rayservice_doc())
    serve = objects[("Service", "fruit-serve-svc")]
    selector = serve["spec"]["selector"]
    assert selector == {
        naming.ORIGIN_KIND: "RayService",
        naming.ORIGIN_NAME: "fruit",
        naming.RAY_SERVE: "true",
        naming.SERVE_ACTIVE: "true",
    }
    assert serve["spec"]["ports"] == [{"name": "serve", "port": 8000}]
    assert serve["metadata"]["labels"][naming.RAY_SERVE] == "fruit-serve"
    assert serve["metadata"]["labels"][naming.RAY_ORIGIN_CRD] == "RayService"
    # Git never declares the label: until the syncer sets it, no pod is selected.
    for pod in pods(objects):
        assert naming.SERVE_ACTIVE not in pod["metadata"]["labels"]
        assert not matches(selector, pod)
    workers = [
        p for p in pods(objects) if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "worker"
    ]
    assert all(matches(selector, activated(p)) for p in workers)


def test_serve_service_does_not_select_another_rayservice():
    objects = render(rayservice_doc())
    other_doc = rayservice_doc()
    other_doc["metadata"]["name"] = "other"
    other = render(other_doc)
    selector = objects[("Service", "fruit-serve-svc")]["spec"]["selector"]
    assert not any(matches(selector, activated(p)) for p in pods(other))


def test_head_service_has_kuberay_labels_and_selects_the_active_head():
    objects = render(rayservice_doc())
    head = objects[("Service", "fruit-head-svc")]
    generation_head = objects[("Service", f"{generation_of(rayservice_doc())}-head-svc")]
    assert head["metadata"]["labels"] == {
        naming.RAY_ORIGIN_NAME: "fruit",
        naming.RAY_ORIGIN_CRD: "RayService",
        naming.RAY_NODE_TYPE: "head",
        naming.RAY_IDENTIFIER: "fruit-head",
        naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
        naming.ORIGIN_KIND: "RayService",
        naming.ORIGIN_NAME: "fruit",
    }
    assert "annotations" not in head["metadata"]
    # Same ports and headless shape as the generation's own head Service (§3.3).
    assert head["spec"]["ports"] == generation_head["spec"]["ports"]
    assert head["spec"]["clusterIP"] == "None"
    heads = [p for p in pods(objects) if matches(head["spec"]["selector"], activated(p))]
    assert [p["metadata"]["labels"][naming.RAY_NODE_TYPE] for p in heads] == ["head"]


def test_head_service_type_follows_head_group_service_type():
    config = cluster_config()
    config["headGroupSpec"]["serviceType"] = "NodePort"
    objects = render(rayservice_doc(config))
    assert objects[("Service", "fruit-head-svc")]["spec"]["type"] == "NodePort"
    assert "clusterIP" not in objects[("Service", "fruit-head-svc")]["spec"]
    assert objects[("Service", "fruit-serve-svc")]["spec"]["type"] == "NodePort"


def test_exclude_head_pod_from_serve_service():
    objects = render(rayservice_doc(excludeHeadPodFromServeSvc=True))
    selector = objects[("Service", "fruit-serve-svc")]["spec"]["selector"]
    assert selector[naming.RAY_NODE_TYPE] == "worker"
    for pod in pods(objects):
        serving = copy.deepcopy(activated(pod))
        serving["metadata"]["labels"][naming.RAY_SERVE] = "true"  # even a healthy head proxy
        is_worker = pod["metadata"]["labels"][naming.RAY_NODE_TYPE] == "worker"
        assert matches(selector, serving) == is_worker


def test_serve_ports_are_named_serve_or_prefixed_serve_and_have_no_app_protocol():
    ports = [
        {"name": "dashboard", "containerPort": 8265},
        {"name": "serve-grpc", "containerPort": 9000},
        {"name": "serve", "containerPort": 8001},
        {"name": "server", "containerPort": 7000},
    ]
    objects = render(rayservice_doc(cluster_config(ports)))
    assert objects[("Service", "fruit-serve-svc")]["spec"]["ports"] == [
        {"name": "serve", "port": 8001},
        {"name": "serve-grpc", "port": 9000},
    ]


def test_missing_serve_port_is_an_error():
    config = cluster_config([{"name": "dashboard", "containerPort": 8265}])
    lines, objects = compile_doc(rayservice_doc(config))
    assert objects == []
    assert lines == [
        "error: $.spec.rayClusterConfig.headGroupSpec.template.spec.containers[0].ports: the head "
        "container declares no port named 'serve' (or with the prefix 'serve-', e.g. "
        "'serve-grpc'); KubeRay would never create the Kubernetes Service for Ray Serve: add "
        "such a port"
    ]


def test_missing_dashboard_port_is_an_error():
    config = cluster_config([{"name": "serve", "containerPort": 8000}])
    lines, objects = compile_doc(rayservice_doc(config))
    assert objects == []
    assert len(lines) == 1
    assert "declares no port named 'dashboard'" in lines[0]


def custom_serve_service(**spec: Any) -> Manifest:
    return {
        "metadata": {
            "name": "custom-serve",
            "namespace": "elsewhere",
            "labels": {"team": "fruit", naming.RAY_SERVE: "overridden"},
            "annotations": {"example.com/lb": "internal"},
        },
        "spec": {
            "type": "LoadBalancer",
            "ports": [{"name": "custom", "port": 12345, "targetPort": 12345}],
            **spec,
        },
    }


def test_custom_serve_service_keeps_only_auto_detected_ports_and_warns():
    lines, objects = compile_doc(rayservice_doc(serveService=custom_serve_service()))
    assert lines == [
        "warning: $.spec.serveService.spec.ports[0]: port custom is dropped (as in KubeRay): only "
        "the head container's serve ports are exposed (serve); give this port one of those names"
    ]
    serve = next(o for o in objects if o["metadata"]["name"] == "custom-serve")
    assert serve["metadata"]["namespace"] == "serving"
    assert serve["metadata"]["labels"]["team"] == "fruit"
    assert serve["metadata"]["labels"][naming.RAY_SERVE] == "fruit-serve"
    assert serve["metadata"]["annotations"] == {"example.com/lb": "internal"}
    assert serve["spec"]["type"] == "LoadBalancer"
    assert serve["spec"]["ports"] == [{"name": "serve", "port": 8000}]
    assert serve["spec"]["selector"][naming.SERVE_ACTIVE] == "true"
    assert not [o for o in objects if o["metadata"]["name"] == "fruit-serve-svc"]


def test_custom_serve_service_port_with_an_auto_detected_name_replaces_it():
    custom = custom_serve_service(
        ports=[{"name": "serve", "port": 80, "targetPort": 8000, "appProtocol": "http"}]
    )
    lines, objects = compile_doc(rayservice_doc(serveService=custom))
    assert lines == []
    serve = next(o for o in objects if o["metadata"]["name"] == "custom-serve")
    assert serve["spec"]["ports"] == [
        {"name": "serve", "port": 80, "targetPort": 8000, "appProtocol": "http"}
    ]


def test_custom_serve_service_ports_are_kept_when_the_head_has_no_serve_port():
    config = cluster_config([{"name": "dashboard", "containerPort": 8265}])
    lines, objects = compile_doc(rayservice_doc(config, serveService=custom_serve_service()))
    assert lines == []
    serve = next(o for o in objects if o["metadata"]["name"] == "custom-serve")
    assert serve["spec"]["ports"] == [{"name": "custom", "port": 12345, "targetPort": 12345}]


def test_custom_serve_service_without_any_port_is_an_error():
    config = cluster_config([{"name": "dashboard", "containerPort": 8265}])
    custom = custom_serve_service()
    del custom["spec"]["ports"]
    lines, objects = compile_doc(rayservice_doc(config, serveService=custom))
    assert objects == []
    assert len(lines) == 1
    assert lines[0].startswith("error: $.spec.serveService: the head container declares no port")


# --- pods of a RayService generation (reference §3.2) -------------------------------------------


def test_pods_get_rayservice_labels_env_and_worker_readiness_probe():
    objects = render(rayservice_doc())
    for pod in pods(objects):
        labels = pod["metadata"]["labels"]
        head = labels[naming.RAY_NODE_TYPE] == "head"
        assert naming.RAY_SERVE not in labels  # the syncer sets it from proxy health
        assert labels[naming.RAY_NODE_TYPE] == ("head" if head else "worker")
        assert labels[naming.ORIGIN_KIND] == "RayService"
        assert labels[naming.ORIGIN_NAME] == "fruit"
        ray = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in ray["env"]}
        assert env["RAY_timeout_ms_task_wait_for_death_info"] == "0"
        assert env["RAY_gcs_server_request_timeout_seconds"] == "5"
        assert env["RAY_SERVE_KV_TIMEOUT_S"] == "5"
        if head:
            assert (
                env["RAY_USAGE_STATS_EXTRA_TAGS"] == "kuberay_version=v1.7.0;kuberay_crd=RayService"
            )
        else:
            probe = ray["readinessProbe"]
            assert probe["failureThreshold"] == 1
            assert probe["exec"]["command"][2].endswith(
                "&& wget --tries 1 -T 10 -q -O- http://localhost:8000/-/healthz | grep success"
            )


# --- prune protection and labels ----------------------------------------------------------------


def _protected(obj: Manifest) -> bool:
    annotations = obj["metadata"].get("annotations") or {}
    return all(annotations.get(k) == v for k, v in naming.PRUNE_PROTECTION.items())


@pytest.mark.parametrize("strategy", [None, {"type": "NewCluster"}, incremental_strategy()])
def test_generation_objects_are_prune_protected_and_the_rest_is_not(strategy):
    doc = rayservice_doc() if strategy is None else rayservice_doc(upgradeStrategy=strategy)
    gen = generation_of(doc)
    objects = render(doc)
    for (kind, name), obj in objects.items():
        generation = name.startswith(f"{gen}-")
        assert _protected(obj) == generation, (kind, name)
        if generation:
            assert obj["metadata"]["labels"][naming.RAY_CLUSTER] == gen


def test_strategy_none_renders_without_prune_protection():
    objects = render(rayservice_doc(upgradeStrategy={"type": "None"}))
    assert not any(_protected(o) for o in objects.values())
    assert intent(objects)["derived"]["generation"]["pruneProtected"] is False


def test_every_object_carries_the_source_labels():
    for strategy in ({"type": "NewCluster"}, incremental_strategy()):
        objects = render(rayservice_doc(upgradeStrategy=strategy))
        for obj in objects.values():
            labels = obj["metadata"]["labels"]
            assert labels[naming.MANAGED_BY] == naming.MANAGED_BY_VALUE
            assert labels[naming.ORIGIN_KIND] == "RayService"
            assert labels[naming.ORIGIN_NAME] == "fruit"


# --- incremental upgrade -------------------------------------------------------------------------


def test_incremental_renders_gateway_route_and_per_generation_serve_service():
    doc = rayservice_doc(upgradeStrategy=incremental_strategy())
    gen = generation_of(doc)
    objects = render(doc)
    assert ("Service", "fruit-serve-svc") not in objects
    source = {
        naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
        naming.ORIGIN_KIND: "RayService",
        naming.ORIGIN_NAME: "fruit",
    }
    assert objects[("Gateway", "fruit-gateway")] == {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "fruit-gateway", "namespace": "serving", "labels": source},
        "spec": {
            "gatewayClassName": "istio",
            "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}],
        },
    }
    assert objects[("HTTPRoute", "fruit-httproute")] == {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "fruit-httproute", "namespace": "serving", "labels": source},
        "spec": {
            "parentRefs": [{"name": "fruit-gateway", "namespace": "serving"}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": [
                        {
                            "name": f"{gen}-serve-svc",
                            "namespace": "serving",
                            "port": 8000,
                            "weight": 100,
                        }
                    ],
                }
            ],
        },
    }
    serve = objects[("Service", f"{gen}-serve-svc")]
    assert serve["metadata"]["labels"][naming.RAY_ORIGIN_NAME] == gen  # the cluster's name (§3.5)
    assert serve["metadata"]["labels"][naming.RAY_SERVE] == f"{gen}-serve"
    assert serve["spec"]["selector"] == {naming.RAY_CLUSTER: gen, naming.RAY_SERVE: "true"}
    assert serve["spec"]["ports"] == [{"name": "serve", "port": 8000}]
    workers = [
        p for p in pods(objects) if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "worker"
    ]
    assert workers
    assert not any(matches(serve["spec"]["selector"], p) for p in workers)
    assert all(matches(serve["spec"]["selector"], activated(p)) for p in workers)


def test_incremental_serve_service_follows_service_type_and_head_exclusion():
    config = cluster_config()
    config["headGroupSpec"]["serviceType"] = "NodePort"
    doc = rayservice_doc(
        config, upgradeStrategy=incremental_strategy(), excludeHeadPodFromServeSvc=True
    )
    gen = generation_of(doc)
    serve = render(doc)[("Service", f"{gen}-serve-svc")]
    assert serve["spec"]["type"] == "NodePort"
    assert serve["spec"]["selector"] == {
        naming.RAY_CLUSTER: gen,
        naming.RAY_SERVE: "true",
        naming.RAY_NODE_TYPE: "worker",
    }


def test_incremental_route_port_is_the_port_named_exactly_serve_else_8000():
    ports = [
        {"name": "dashboard", "containerPort": 8265},
        {"name": "serve-http", "containerPort": 9000},
    ]
    objects = render(rayservice_doc(cluster_config(ports), upgradeStrategy=incremental_strategy()))
    route = objects[("HTTPRoute", "fruit-httproute")]
    assert route["spec"]["rules"][0]["backendRefs"][0]["port"] == 8000
    ports[1] = {"name": "serve", "containerPort": 9000}
    objects = render(rayservice_doc(cluster_config(ports), upgradeStrategy=incremental_strategy()))
    route = objects[("HTTPRoute", "fruit-httproute")]
    assert route["spec"]["rules"][0]["backendRefs"][0]["port"] == 9000


def test_incremental_ignores_serve_service_with_a_warning():
    doc = rayservice_doc(
        upgradeStrategy=incremental_strategy(), serveService=custom_serve_service()
    )
    lines, objects = compile_doc(doc)
    assert lines == [
        "warning: $.spec.serveService: serveService is ignored with "
        "NewClusterWithIncrementalUpgrade (as in KubeRay): clients reach the Serve applications "
        "through the Gateway"
    ]
    assert not [o for o in objects if o["metadata"]["name"] == "custom-serve"]


def test_incremental_refuses_the_cluster_serve_service_annotation():
    doc = rayservice_doc(
        upgradeStrategy=incremental_strategy(),
        annotations={naming.ANN_ENABLE_SERVE_SERVICE: "true"},
    )
    lines, objects = compile_doc(doc)
    assert objects == []
    assert lines == [
        'error: $.metadata.annotations["ray.io/enable-serve-service"]: with '
        "NewClusterWithIncrementalUpgrade the cluster's own serve Service would have the name of "
        "the per-generation serve Service; remove the annotation"
    ]


def test_incremental_gateway_and_route_validate_against_gateway_api_schemas():
    objects = render(rayservice_doc(upgradeStrategy=incremental_strategy()))
    for key in [("Gateway", "fruit-gateway"), ("HTTPRoute", "fruit-httproute")]:
        assert validate_object(objects[key]) == []


def test_route_with_two_weighted_backends_validates():
    backends = [gateway.Backend("a-serve-svc", 8000, 70), gateway.Backend("b-serve-svc", 8000, 30)]
    route = gateway.build_httproute("svc", "ns", backends, {})
    assert [b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]] == [70, 30]
    assert validate_object(route) == []


# --- the intent ConfigMap ------------------------------------------------------------------------


def test_intent_records_spec_generation_and_routing():
    doc = rayservice_doc(
        upgradeStrategy=incremental_strategy(maxSurgePercent=20),
        annotations={
            contract.ANN_UPGRADE_PAUSED: "true",
            contract.ANN_PROGRESS_DEADLINE: "900",
        },
        rayClusterDeletionDelaySeconds=30,
    )
    doc["metadata"]["labels"] = {"team": "fruit"}
    gen = generation_of(doc)
    objects = render(doc)
    config_map = objects[("ConfigMap", "fruit-kuberay-intent")]
    assert config_map["metadata"]["labels"][naming.ROLE] == naming.ROLE_INTENT
    assert not _protected(config_map)
    head = next(p for p in pods(objects) if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "head")
    workers = sorted(
        p["metadata"]["name"]
        for p in pods(objects)
        if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "worker"
    )
    expected_spec = {k: v for k, v in doc["spec"].items() if k != "rayClusterConfig"}
    assert intent(objects) == {
        "version": 1,
        "kind": "RayService",
        "metadata": {
            "name": "fruit",
            "namespace": "serving",
            "labels": {"team": "fruit"},
            "annotations": {
                contract.ANN_UPGRADE_PAUSED: "true",
                contract.ANN_PROGRESS_DEADLINE: "900",
            },
        },
        "spec": expected_spec,
        "derived": {
            "generation": {
                "name": gen,
                "hash": gen.rpartition("-")[2],
                "headServiceName": f"{gen}-head-svc",
                "dashboardURL": f"http://{gen}-head-svc.serving.svc.cluster.local:8265",
                "serveConfigMapName": f"{gen}-serve-config",
                "serveServiceName": f"{gen}-serve-svc",
                "servePort": 8000,
                "headPodName": head["metadata"]["name"],
                "workerPodNames": workers,
                "pruneProtected": True,
            },
            "headServiceName": "fruit-head-svc",
            "serveServiceName": None,
            "upgrade": {
                "type": INCREMENTAL,
                "paused": True,
                "progressDeadlineSeconds": 900,
                "rayClusterDeletionDelaySeconds": 30,
                "routing": {
                    "gatewayName": "fruit-gateway",
                    "httpRouteName": "fruit-httproute",
                    "currentGeneration": gen,
                    "servePort": 8000,
                    "stepSizePercent": 10,
                    "intervalSeconds": 30,
                    "maxSurgePercent": 20,
                },
            },
        },
    }


def test_intent_defaults_for_new_cluster():
    objects = render(rayservice_doc())
    found = intent(objects)["derived"]
    assert found["headServiceName"] == "fruit-head-svc"
    assert found["serveServiceName"] == "fruit-serve-svc"
    assert found["generation"]["serveServiceName"] is None
    assert found["upgrade"] == {
        "type": "NewCluster",
        "paused": False,
        "progressDeadlineSeconds": None,
        "rayClusterDeletionDelaySeconds": 60,
        "routing": None,
    }
    assert "rayClusterConfig" not in intent(objects)["spec"]


def test_intent_max_surge_defaults_to_100():
    objects = render(rayservice_doc(upgradeStrategy=incremental_strategy()))
    assert intent(objects)["derived"]["upgrade"]["routing"]["maxSurgePercent"] == 100


def test_intent_dashboard_url_follows_port_and_cluster_domain():
    ports = [{"name": "dashboard", "containerPort": 8300}, {"name": "serve", "containerPort": 8000}]
    options = RenderOptions(cluster_domain="corp.internal")
    objects = render(rayservice_doc(cluster_config(ports)), options)
    gen = generation_of(rayservice_doc(cluster_config(ports)))
    assert intent(objects)["derived"]["generation"]["dashboardURL"] == (
        f"http://{gen}-head-svc.serving.svc.corp.internal:8300"
    )


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (contract.ANN_UPGRADE_PAUSED, "yes", 'expected "true" or "false", got \'yes\''),
        (
            contract.ANN_PROGRESS_DEADLINE,
            "10m",
            "expected a positive integer of seconds, got '10m'",
        ),
        (contract.ANN_PROGRESS_DEADLINE, "0", "expected a positive integer of seconds, got '0'"),
    ],
)
def test_bad_upgrade_annotations_are_errors(key, value, expected):
    lines, objects = compile_doc(rayservice_doc(annotations={key: value}))
    assert objects == []
    assert lines == [f'error: $.metadata.annotations["{key}"]: {expected}']


def test_suspended_rayservice_renders_only_its_intent():
    objects = render(rayservice_doc(suspend=True))
    assert list(objects) == [("ConfigMap", "fruit-kuberay-intent")]
    found = intent(objects)
    assert found["derived"]["generation"] is None
    assert found["spec"]["suspend"] is True


def test_rayservice_managed_by_multikueue_renders_nothing():
    lines, objects = compile_doc(rayservice_doc(managedBy="kueue.x-k8s.io/multikueue"))
    assert objects == []
    assert [line.split(":")[0] for line in lines] == ["warning"]


def test_rule_errors_stop_the_build():
    doc = rayservice_doc(upgradeStrategy={"type": "Blue"})
    lines, objects = compile_doc(doc)
    assert objects == []
    assert any("Spec.UpgradeStrategy.Type value Blue is invalid" in line for line in lines)


def test_render_is_deterministic():
    doc = rayservice_doc(upgradeStrategy=incremental_strategy())
    assert compile_doc(doc) == compile_doc(copy.deepcopy(doc))


# --- the KubeRay samples ------------------------------------------------------------------------

# Samples the renderer refuses, and the one line that says why.
REFUSED: dict[str, str] = {}


def _has_rayservice(path: Path) -> bool:
    documents, problems = sources.read_documents([str(path)])
    return not problems and any(
        isinstance(d.data, dict) and d.data.get("kind") == "RayService" for d in documents
    )


SERVICE_SAMPLES = sorted(p for p in SAMPLES.rglob("*.yaml") if _has_rayservice(p))


def test_the_rayservice_samples_are_there():
    assert len(SERVICE_SAMPLES) >= 10, f"expected the KubeRay samples under {SAMPLES}"


@pytest.mark.parametrize("sample", SERVICE_SAMPLES, ids=[p.name for p in SERVICE_SAMPLES])
def test_rayservice_sample_renders_valid_objects(sample):
    documents, problems = sources.read_documents([str(sample)])
    assert not problems
    refusal = REFUSED.get(sample.name)
    if refusal is not None:
        with pytest.raises(ManifestError) as caught:
            compiler.render(documents, OPTIONS)
        errors = [d for d in caught.value.diagnostics if d.problem.severity == "error"]
        assert len(errors) == 1
        assert refusal in errors[0].problem.message
        return
    result = compiler.render(documents, OPTIONS)
    kinds = {o["kind"] for o in result.objects}
    assert {"Pod", "Service", "ConfigMap"} <= kinds
    failures = {}
    for obj in result.objects:
        found = validate_object(obj)
        if found:
            failures[f"{obj['kind']}/{obj['metadata']['name']}"] = found
    assert not failures
