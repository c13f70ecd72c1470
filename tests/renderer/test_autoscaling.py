"""What git holds for an autoscaled cluster (renderer/objects/autoscaling.py, the pods' sidecar).

No worker Pods; the worker template in `workers.json` is exactly the rendered worker minus
name and replica index; the provider and wrapper sources are copied byte for byte; the head's
Role is strictly less than KubeRay's; the output is deterministic and valid Kubernetes.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from renderer import compile as compiler
from renderer import naming
from renderer.errors import ManifestError, Origin
from renderer.manifest import Manifest
from renderer.model.document import Document
from renderer.objects import autoscaling
from renderer.options import RenderOptions
from tests.validation import validate_object

ASSETS = Path(autoscaling.__file__).parent.parent / "assets" / "autoscaler"


def ray(cpu: str = "1") -> Manifest:
    return {"name": "ray", "image": "rayproject/ray:2.52.0", "resources": {"limits": {"cpu": cpu}}}


def cluster(**spec: Any) -> Manifest:
    body: Manifest = {
        "enableInTreeAutoscaling": True,
        "headGroupSpec": {"template": {"spec": {"containers": [ray("2")]}}},
        "workerGroupSpecs": [
            {
                "groupName": "small",
                "replicas": 2,
                "minReplicas": 1,
                "maxReplicas": 5,
                "template": {"spec": {"containers": [ray()]}},
            }
        ],
        **spec,
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "elastic", "namespace": "ml"},
        "spec": body,
    }


def render(*docs: Manifest, options: RenderOptions | None = None) -> list[Manifest]:
    documents = [
        Document(copy.deepcopy(doc), Origin("in.yaml", i + 1)) for i, doc in enumerate(docs)
    ]
    return list(compiler.render(documents, options or RenderOptions()).objects)


def kinds(objects: list[Manifest]) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in objects]


def configmap(objects: list[Manifest]) -> Manifest:
    found = [o for o in objects if o["metadata"]["name"] == "elastic-autoscaling"]
    assert len(found) == 1
    return found[0]


def test_git_holds_the_head_the_configmap_and_the_rbac_but_no_worker_pods() -> None:
    objects = render(cluster())
    assert [k for k in kinds(objects) if k[0] != "Pod"] == [
        ("ServiceAccount", "elastic"),
        ("ConfigMap", "elastic-autoscaling"),
        ("Role", "elastic"),
        ("RoleBinding", "elastic"),
        ("Service", "elastic-head-svc"),
    ]
    pods = [o for o in objects if o["kind"] == "Pod"]
    assert [p["metadata"]["labels"][naming.RAY_NODE_TYPE] for p in pods] == ["head"]
    for obj in objects:
        assert validate_object(obj) == [], obj["kind"]


def test_the_head_role_is_less_than_kuberays() -> None:
    role = next(o for o in render(cluster()) if o["kind"] == "Role")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["elastic-autoscaler-state"],
            "verbs": ["get", "patch"],
        },
    ]
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert not verbs & {"create", "delete", "update", "deletecollection", "*"}
    assert all(rule["apiGroups"] == [""] for rule in role["rules"])


def test_a_template_service_account_is_bound_and_not_rendered() -> None:
    doc = cluster()
    doc["spec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] = "mine"
    objects = render(doc)
    assert ("ServiceAccount", "elastic") not in kinds(objects)
    binding = next(o for o in objects if o["kind"] == "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mine", "namespace": "ml"}]
    head = next(o for o in objects if o["kind"] == "Pod")
    assert head["spec"]["serviceAccountName"] == "mine"


def test_the_sources_are_copied_byte_for_byte() -> None:
    data = configmap(render(cluster()))["data"]
    for key in (autoscaling.PROVIDER_KEY, autoscaling.WRAPPER_KEY):
        assert data[key].encode("utf-8") == (ASSETS / key).read_bytes()


def test_the_worker_template_is_the_rendered_worker_without_name_and_index() -> None:
    # Version unset: KubeRay builds workers as without autoscaling (no forced restartPolicy).
    static = cluster(enableInTreeAutoscaling=False)
    workers = [
        o
        for o in render(static)
        if o["kind"] == "Pod" and o["metadata"]["labels"][naming.RAY_NODE_TYPE] == "worker"
    ]
    assert len(workers) == 2
    expected = copy.deepcopy(workers[0])
    del expected["metadata"]["name"]
    del expected["metadata"]["labels"][naming.RAY_REPLICA_INDEX]
    templates = json.loads(configmap(render(cluster()))["data"][autoscaling.WORKERS_KEY])
    assert templates == {"small": expected}
    groups = json.loads(configmap(render(cluster()))["data"][autoscaling.GROUPS_KEY])
    assert groups == {"small": {"min": 1, "max": 5, "replicas": 2}}


def test_autoscaler_v2_forces_restart_policy_never_on_head_and_workers() -> None:
    objects = render(cluster(autoscalerOptions={"version": "v2"}))
    head = next(o for o in objects if o["kind"] == "Pod")
    assert head["spec"]["restartPolicy"] == "Never"
    assert head["spec"]["containers"][0]["env"][0] == {
        "name": "RAY_enable_autoscaler_v2",
        "value": "true",
    }
    template = json.loads(configmap(objects)["data"][autoscaling.WORKERS_KEY])["small"]
    assert template["spec"]["restartPolicy"] == "Never"


def test_the_sidecar_runs_the_wrapper_from_the_mounted_configmap() -> None:
    head = next(o for o in render(cluster()) if o["kind"] == "Pod")
    ray_container, sidecar = head["spec"]["containers"]
    assert "--no-monitor" in ray_container["args"][0]
    assert sidecar["name"] == "autoscaler"
    assert sidecar["image"] == ray_container["image"]
    assert sidecar["args"] == [
        "python /etc/kuberay-gitops/wrapper.py --gcs-port 6379 "
        "--autoscaling-config /etc/kuberay-gitops/autoscaling.yaml"
    ]
    assert {"name": "PYTHONPATH", "value": "/etc/kuberay-gitops"} in sidecar["env"]
    assert sidecar["volumeMounts"] == [
        {"name": "ray-logs", "mountPath": "/tmp/ray"},
        {"name": "kuberay-autoscaling", "mountPath": "/etc/kuberay-gitops", "readOnly": True},
    ]
    assert {"name": "kuberay-autoscaling", "configMap": {"name": "elastic-autoscaling"}} in head[
        "spec"
    ]["volumes"]


def test_a_suspended_autoscaled_cluster_renders_no_configmap() -> None:
    objects = render(cluster(suspend=True))
    assert not any(o["kind"] in ("Pod", "ConfigMap") for o in objects)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_input_same_bytes_in_any_order(seed: int) -> None:
    docs = [cluster(), cluster(), cluster()]
    for index, doc in enumerate(docs):
        doc["metadata"]["name"] = f"elastic-{index}"
    once = render(*docs)
    shuffled = docs[:]
    random.Random(seed).shuffle(shuffled)
    assert render(*shuffled) == once == render(*docs)


def test_a_worker_template_without_its_configmap_is_a_bug() -> None:
    pod = {"kind": "Pod", "metadata": {"namespace": "ml", "labels": {naming.RAY_GROUP: "g"}}}
    pod["x-kuberay-autoscaling-configmap"] = "missing"
    assert autoscaling.is_template(pod)
    with pytest.raises(AssertionError, match="without their ConfigMap"):
        autoscaling.fold_templates([pod])


def test_kueue_plain_pod_groups_are_refused_with_autoscaling() -> None:
    with pytest.raises(ManifestError) as caught:
        render(cluster(), options=RenderOptions(kueue_queue="team"))
    assert [d.problem.message for d in caught.value.diagnostics] == [
        "Kueue's plain-pod groups need a fixed pod count, which an autoscaled cluster does not "
        "have; remove the Kueue queue or set enableInTreeAutoscaling to false"
    ]
