"""NetworkPolicies of a RayJob's cluster and the unrestricted direction (raycluster.md §1.5.3)."""

from __future__ import annotations

from typing import Any

import pytest

from renderer import naming
from renderer.model.raycluster import RayCluster, parse_raycluster
from renderer.objects import network

Manifest = dict[str, Any]


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


# --- NetworkPolicies (§1.5.3) --------------------------------------------------------------------

JOB_LABELS = {
    naming.RAY_ORIGIN_NAME: "job",
    naming.RAY_ORIGIN_CRD: "RayJob",
    naming.RAY_JOB_SUBMISSION_MODE: "K8sJobMode",
}
SUBMITTER_PEER = {
    "podSelector": {"matchLabels": {naming.RAY_ORIGIN_NAME: "job", naming.RAY_ORIGIN_CRD: "RayJob"}}
}


def head_policy(c: RayCluster, job_name: str | None = "job") -> Manifest:
    policy: Manifest = network.build_network_policies(c, job_name=job_name)[0]
    return policy


@pytest.mark.parametrize(
    ("port", "expected"),
    [("8266", 8266), ("dash", 8265), ("99999999999", 8265)],
)
def test_k8sjobmode_submitter_may_reach_the_dashboard_port(port: str, expected: int) -> None:
    # Rule 2: "{from: [submitter pod selector], ports: [{protocol: TCP, port: <dashboard
    # port>}]}" where the port is rayStartParams dashboard-port "parsed as int32, else 8265".
    c = cluster(JOB_LABELS, networkPolicy={}, headParams={"dashboard-port": port})
    ingress = head_policy(c)["spec"]["ingress"]
    assert ingress[1] == {
        "from": [SUBMITTER_PEER],
        "ports": [{"protocol": "TCP", "port": expected}],
    }


@pytest.mark.parametrize("mode", ["HTTPMode", "InteractiveMode", "SidecarMode"])
def test_other_submission_modes_get_no_submitter_rule(mode: str) -> None:
    # Rule 2 applies "only if the RayCluster has label ray.io/job-submission-mode: K8sJobMode":
    # the other modes have no submitter Pod outside the head.
    c = cluster({**JOB_LABELS, naming.RAY_JOB_SUBMISSION_MODE: mode}, networkPolicy={})
    assert len(head_policy(c)["spec"]["ingress"]) == 1


def test_a_standalone_cluster_gets_no_submitter_rule() -> None:
    c = cluster(JOB_LABELS, networkPolicy={})
    assert len(head_policy(c, job_name=None)["spec"]["ingress"]) == 1


def test_deny_all_egress_leaves_ingress_open() -> None:
    # "A direction not restricted by the mode is absent from both policyTypes and the rule list."
    c = cluster(JOB_LABELS, networkPolicy={"mode": "DenyAllEgress"})
    for policy in network.build_network_policies(c, job_name="job"):
        assert policy["spec"]["policyTypes"] == ["Egress"]
        assert "ingress" not in policy["spec"]
