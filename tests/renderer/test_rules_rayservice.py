"""Tests for renderer.rules.rayservice: KubeRay's RayService rules and the renderer's refusals."""

from __future__ import annotations

from typing import Any

import pytest

from renderer.options import RenderOptions
from renderer.rules.rayservice import check_rayservice
from tests.renderer.test_rules_raycluster import cluster_spec, head, lines

Manifest = dict[str, Any]

CUO = "$.spec.upgradeStrategy.clusterUpgradeOptions"
TIMEOUT = '$.metadata.annotations["ray.io/initializing-timeout"]'


def rayservice(annotations: dict[str, str] | None = None, **fields: Any) -> Manifest:
    spec: Manifest = {"serveConfigV2": "applications: []\n", "rayClusterConfig": cluster_spec()}
    spec.update(fields)
    metadata: Manifest = {"name": "svc"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": metadata, "spec": spec}


def run(doc: Manifest, **gates: bool) -> list[str]:
    options = RenderOptions().with_gates(**gates) if gates else RenderOptions()
    return lines(check_rayservice(doc, options))


def incremental(**options: Any) -> Manifest:
    upgrade = {"stepSizePercent": 10, "intervalSeconds": 30, "gatewayClassName": "istio"}
    upgrade.update(options)
    return {"type": "NewClusterWithIncrementalUpgrade", "clusterUpgradeOptions": upgrade}


def test_valid_service_has_no_problems():
    assert run(rayservice()) == []


def test_a_service_without_cluster_config_checks_the_rest():
    doc = rayservice(rayClusterDeletionDelaySeconds=-2)
    del doc["spec"]["rayClusterConfig"]
    assert run(doc) == [
        "error: $.spec.rayClusterDeletionDelaySeconds: Spec.RayClusterDeletionDelaySeconds should "
        "be a non-negative integer, got -2"
    ]


def test_name_limit_is_47():
    doc = rayservice()
    doc["metadata"]["name"] = "s" * 47
    assert run(doc) == []
    doc["metadata"]["name"] = "s" * 48
    assert run(doc) == [
        "error: $.metadata.name: RayService name should be no more than 47 characters, got 48; "
        "shorten the name"
    ]


def test_name_must_be_a_dns1035_label():
    doc = rayservice()
    doc["metadata"]["name"] = "svc-"
    assert run(doc)[0].startswith(
        "error: $.metadata.name: RayService name should be a valid DNS1035 label: [a DNS-1035"
    )


def test_generate_name_is_refused():
    doc = rayservice()
    doc["metadata"] = {"generateName": "svc-"}
    assert run(doc) == [
        "error: $.metadata.generateName: generateName is not supported: kuberay render needs "
        "fixed names for GitOps; set metadata.name instead"
    ]


def test_managed_by_multikueue_is_a_warning_only():
    doc = rayservice(managedBy="kueue.x-k8s.io/multikueue", rayClusterDeletionDelaySeconds=-1)
    assert run(doc) == [
        'warning: $.spec.managedBy: managedBy is "kueue.x-k8s.io/multikueue": KubeRay ignores a '
        'RayService that is not managed by "ray.io/kuberay-operator", and so does kuberay render: '
        "nothing is rendered for it"
    ]


@pytest.mark.parametrize("value", ["30m", "1h30m", "1.5h", ".5s", "90", "+5", ""])
def test_initializing_timeout_valid_values(value):
    assert run(rayservice(annotations={"ray.io/initializing-timeout": value})) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "annotation ray.io/initializing-timeout must be a positive duration, got: 0"),
        ("-5m", "annotation ray.io/initializing-timeout must be a positive duration, got: -5m"),
        ("0s", "annotation ray.io/initializing-timeout must be a positive duration, got: 0s"),
        (
            "-30",
            "annotation ray.io/initializing-timeout must be a positive integer (seconds), got: -30",
        ),
        (
            "00",
            "annotation ray.io/initializing-timeout must be a positive integer (seconds), got: 00",
        ),
        (
            "5 minutes",
            "annotation ray.io/initializing-timeout has invalid format: 5 minutes. "
            "Expected Go duration format (e.g., '5m', '1h') or positive integer seconds",
        ),
        (
            "5sec",
            "annotation ray.io/initializing-timeout has invalid format: 5sec. Expected Go "
            "duration format (e.g., '5m', '1h') or positive integer seconds",
        ),
    ],
)
def test_initializing_timeout_invalid_values(value, message):
    assert run(rayservice(annotations={"ray.io/initializing-timeout": value})) == [
        f"error: {TIMEOUT}: {message}"
    ]


def test_k8s_token_auth_is_refused_for_services():
    config = cluster_spec(
        rayVersion="2.55.0", authOptions={"mode": "token", "enableK8sTokenAuth": True}
    )
    assert run(rayservice(rayClusterConfig=config)) == [
        "error: $.spec.rayClusterConfig.authOptions.enableK8sTokenAuth: K8s token auth mode is "
        "currently not supported for RayService; remove enableK8sTokenAuth"
    ]


def test_cluster_rules_run_on_rayclusterconfig_with_service_creator():
    config = cluster_spec(
        upgradeStrategy={"type": "None"},
        headGroupSpec=head(resources={"CPU": "1"}, rayStartParams={"num-cpus": "1"}),
    )
    assert run(rayservice(rayClusterConfig=config)) == [
        "error: $.spec.rayClusterConfig.headGroupSpec.resources: resource fields should not be "
        "set in both rayStartParams and Resources for Head group; please use only one",
        "error: $.spec.rayClusterConfig.upgradeStrategy.type: upgradeStrategy cannot be set when "
        "RayCluster is created by RayService; remove upgradeStrategy from the cluster spec",
    ]


def test_head_service_name_is_refused():
    config = cluster_spec(headGroupSpec=head(headService={"metadata": {"name": "mine"}}))
    assert run(rayservice(rayClusterConfig=config)) == [
        "error: $.spec.rayClusterConfig.headGroupSpec.headService.metadata.name: "
        "spec.rayClusterConfig.headGroupSpec.headService.metadata.name should not be set; remove "
        "it (the head Service is named after the RayService)"
    ]
    unnamed = cluster_spec(headGroupSpec=head(headService={"metadata": {"labels": {"a": "b"}}}))
    assert run(rayservice(rayClusterConfig=unnamed)) == []


@pytest.mark.parametrize("kind", ["NewCluster", "None"])
def test_upgrade_types(kind):
    assert run(rayservice(upgradeStrategy={"type": kind})) == []


def test_unknown_upgrade_type():
    assert run(rayservice(upgradeStrategy={"type": "BlueGreen"})) == [
        "error: $.spec.upgradeStrategy.type: Spec.UpgradeStrategy.Type value BlueGreen is invalid, "
        "valid options are NewClusterWithIncrementalUpgrade, NewCluster, or None"
    ]


def test_deletion_delay_must_not_be_negative():
    assert run(rayservice(rayClusterDeletionDelaySeconds=-1)) == [
        "error: $.spec.rayClusterDeletionDelaySeconds: Spec.RayClusterDeletionDelaySeconds should "
        "be a non-negative integer, got -1"
    ]
    assert run(rayservice(rayClusterDeletionDelaySeconds=0)) == []


def test_incremental_upgrade_does_not_need_autoscaling():
    assert run(rayservice(upgradeStrategy=incremental())) == []


def test_incremental_upgrade_needs_its_gate():
    assert run(rayservice(upgradeStrategy=incremental()), RayServiceIncrementalUpgrade=False) == [
        "error: $.spec.upgradeStrategy.type: NewClusterWithIncrementalUpgrade requires the "
        "RayServiceIncrementalUpgrade feature gate (KubeRay would silently treat the strategy as "
        "None); enable it with --feature-gates RayServiceIncrementalUpgrade=true"
    ]


def test_incremental_upgrade_needs_options():
    strategy = {"type": "NewClusterWithIncrementalUpgrade"}
    assert run(rayservice(upgradeStrategy=strategy)) == [
        "error: $.spec.upgradeStrategy: ClusterUpgradeOptions are required for "
        "NewClusterWithIncrementalUpgrade; set upgradeStrategy.clusterUpgradeOptions"
    ]
    empty = {**strategy, "clusterUpgradeOptions": {}}
    assert run(rayservice(upgradeStrategy=empty)) == [
        f"error: {CUO}: stepSizePercent must be between 0 and 100",
        f"error: {CUO}: intervalSeconds must be greater than 0",
        f"error: {CUO}: gatewayClassName is required for NewClusterWithIncrementalUpgrade",
    ]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            {"maxSurgePercent": 101},
            [f"{CUO}.maxSurgePercent: maxSurgePercent must be between 0 and 100"],
        ),
        (
            {"maxSurgePercent": -1, "stepSizePercent": 200},
            [
                f"{CUO}.maxSurgePercent: maxSurgePercent must be between 0 and 100",
                f"{CUO}.stepSizePercent: stepSizePercent must be between 0 and 100",
            ],
        ),
        (
            {"maxSurgePercent": 20, "stepSizePercent": 30},
            [
                f"{CUO}.stepSizePercent: stepSizePercent must be less than or equal to "
                "maxSurgePercent"
            ],
        ),
        ({"maxSurgePercent": 0, "stepSizePercent": 0}, []),
        (
            {"intervalSeconds": 0},
            [f"{CUO}.intervalSeconds: intervalSeconds must be greater than 0"],
        ),
        (
            {"gatewayClassName": ""},
            [
                f"{CUO}.gatewayClassName: gatewayClassName is required for "
                "NewClusterWithIncrementalUpgrade"
            ],
        ),
    ],
)
def test_incremental_upgrade_option_ranges(options, expected):
    assert run(rayservice(upgradeStrategy=incremental(**options))) == [
        f"error: {line}" for line in expected
    ]
