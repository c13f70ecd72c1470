"""Head Service annotations and type (raycluster.md §3.2-§3.3)."""

from __future__ import annotations

from typing import Any

import pytest

from renderer.model.raycluster import RayCluster, parse_raycluster
from renderer.objects import services
from renderer.options import RenderOptions

Manifest = dict[str, Any]
OPTIONS = RenderOptions()


def spec(**fields: Any) -> Manifest:
    head: Manifest = {
        "rayStartParams": fields.pop("headParams", {}),
        "template": {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.52.0"}]}},
        **fields.pop("head", {}),
    }
    return {
        "rayVersion": "2.52.0",
        "headGroupSpec": head,
        "workerGroupSpecs": [
            {
                "groupName": "g",
                "replicas": 1,
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            }
        ],
        **fields,
    }


def cluster(labels: dict[str, str] | None = None, **fields: Any) -> RayCluster:
    return parse_raycluster("c", "ns", spec(**fields), labels=labels)


# --- head Service ------------------------------------------------------------------------------


def test_default_head_service_copies_head_service_annotations() -> None:
    # §3.2: "annotations: <spec.headServiceAnnotations, copied; omitted when empty>".
    svc = services.build_head_service(cluster(headServiceAnnotations={"a": "1"}), OPTIONS)
    assert svc["metadata"]["annotations"] == {"a": "1"}
    plain = services.build_head_service(cluster(), OPTIONS)
    assert "annotations" not in plain["metadata"]


@pytest.mark.parametrize("service_type", ["NodePort", "LoadBalancer"])
def test_a_node_port_or_load_balancer_head_service_is_not_headless(service_type: str) -> None:
    # §3.2: "With serviceType: NodePort or LoadBalancer the Service is a normal one of that
    # type (no clusterIP: None, no publishNotReadyAddresses)".
    svc = services.build_head_service(cluster(head={"serviceType": service_type}), OPTIONS)
    assert svc["spec"]["type"] == service_type
    assert "clusterIP" not in svc["spec"] and "publishNotReadyAddresses" not in svc["spec"]


def test_custom_head_service_annotations_are_overlaid_by_head_service_annotations() -> None:
    # §3.3: "metadata.annotations := user annotations overlaid with spec.headServiceAnnotations
    # (the latter win)"; "spec.type := user type, else headGroupSpec.serviceType".
    custom = {"metadata": {"name": "mine", "annotations": {"a": "user", "b": "user"}}}
    c = cluster(
        head={"headService": custom, "serviceType": "NodePort"},
        headServiceAnnotations={"b": "cluster"},
    )
    svc = services.build_head_service(c, OPTIONS)
    assert svc["metadata"]["name"] == "mine"
    assert svc["metadata"]["annotations"] == {"a": "user", "b": "cluster"}
    assert svc["spec"]["type"] == "NodePort"
