"""NetworkPolicies of a RayJob's cluster and the unrestricted direction (raycluster.md §1.5.3)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from renderer import naming
from renderer.cli import main
from renderer.model.raycluster import RayCluster, parse_raycluster
from renderer.objects import network
from renderer.options import RenderOptions

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
    policy: Manifest = network.build_network_policies(c, RenderOptions(), job_name=job_name)[0]
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
    for policy in network.build_network_policies(c, RenderOptions(), job_name="job"):
        assert policy["spec"]["policyTypes"] == ["Egress"]
        assert "ingress" not in policy["spec"]


# --- beyond KubeRay: the syncer reaches the dashboard (security review L6) ------------------

SYNCER_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-syncer"}},
}


def job_cluster(kind: str, mode: str = "DenyAll", **fields: Any) -> RayCluster:
    labels = JOB_LABELS if kind == "RayJob" else {}
    return parse_raycluster(
        "c", "ns", spec(networkPolicy={"mode": mode}, **fields), labels=labels, origin_kind=kind
    )


@pytest.mark.parametrize("kind", ["RayJob", "RayService"])
@pytest.mark.parametrize("mode", ["DenyAll", "DenyAllIngress"])
def test_the_syncer_may_reach_the_dashboard_of_a_job_or_service_cluster(
    kind: str, mode: str
) -> None:
    c = job_cluster(kind, mode, headParams={"dashboard-port": "8300"})
    ingress = network.build_network_policies(c, RenderOptions(), job_name="job")[0]["spec"][
        "ingress"
    ]
    rule = {"from": [SYNCER_PEER], "ports": [{"protocol": "TCP", "port": 8300}]}
    assert ingress[-1] == rule
    # After KubeRay's own rules, before the user's.
    with_user = job_cluster(kind, mode)
    with_user.spec["networkPolicy"]["head"] = {
        "ingressRules": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]
    }
    user_ingress = network.build_network_policies(with_user, RenderOptions(), job_name="job")[0][
        "spec"
    ]["ingress"]
    assert user_ingress[-2]["from"] == [SYNCER_PEER]
    assert user_ingress[-1] == {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}
    # Workers are never dialled.
    for worker in network.build_network_policies(c, RenderOptions(), job_name="job")[1:]:
        assert SYNCER_PEER not in worker["spec"]["ingress"][-1].get("from", [])


def test_the_syncer_rule_follows_the_options_and_is_left_out_when_not_needed() -> None:
    options = RenderOptions(syncer_namespace="ops", syncer_pod_labels={"app": "s", "tier": "x"})
    c = job_cluster("RayService")
    [rule] = network.build_network_policies(c, options)[0]["spec"]["ingress"][-1:]
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
            "podSelector": {"matchLabels": {"app": "s", "tier": "x"}},
        }
    ]
    off = RenderOptions(syncer_namespace="")
    assert len(network.build_network_policies(c, off)[0]["spec"]["ingress"]) == 1
    # A RayCluster's status comes from its pods: no dashboard rule for the syncer.
    standalone = job_cluster("RayCluster")
    assert (
        len(network.build_network_policies(standalone, RenderOptions())[0]["spec"]["ingress"]) == 1
    )
    # DenyAllEgress restricts no ingress, so nothing to add.
    egress_only = job_cluster("RayJob", "DenyAllEgress")
    assert "ingress" not in network.build_network_policies(egress_only, RenderOptions())[0]["spec"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--syncer-namespace", "Bad_NS"], "'Bad_NS' cannot name a namespace"),
        (["--syncer-pod-label", "app"], "--syncer-pod-label 'app': expected KEY=VALUE"),
        (["--syncer-pod-label", "app=a b"], "--syncer-pod-label 'app=a b': a valid label"),
    ],
)
def test_bad_syncer_options_are_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["render", "-", *args], input="")
    assert result.exit_code == 2
    assert message in result.stderr
