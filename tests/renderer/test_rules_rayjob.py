"""Tests for renderer.rules.rayjob: KubeRay's RayJob rules and the renderer's refusals."""

from __future__ import annotations

from typing import Any

import pytest

from renderer.options import RenderOptions
from renderer.rules.rayjob import check_rayjob
from tests.renderer.test_rules_raycluster import (
    autoscaled,
    cluster_spec,
    head,
    lines,
    pod,
    ray_container,
)

Manifest = dict[str, Any]

DS = "$.spec.deletionStrategy"


def rayjob(**fields: Any) -> Manifest:
    spec: Manifest = {"entrypoint": "python main.py", "rayClusterSpec": cluster_spec()}
    spec.update(fields)
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "job"}, "spec": spec}


def run(doc: Manifest, **gates: bool) -> list[str]:
    options = RenderOptions().with_gates(**gates) if gates else RenderOptions()
    return lines(check_rayjob(doc, options))


def rule(policy: str, ttl: int | None = None, **condition: str) -> Manifest:
    cond: Manifest = dict(condition)
    if ttl is not None:
        cond["ttlSeconds"] = ttl
    return {"policy": policy, "condition": cond}


def test_valid_job_has_no_problems():
    assert run(rayjob()) == []


def test_name_limit_is_47():
    doc = rayjob()
    doc["metadata"]["name"] = "j" * 47
    assert run(doc) == []
    doc["metadata"]["name"] = "j" * 48
    assert run(doc) == [
        "error: $.metadata.name: RayJob name should be no more than 47 characters, got 48; "
        "shorten the name"
    ]


def test_name_must_be_a_dns1035_label():
    doc = rayjob()
    doc["metadata"]["name"] = "my_job"
    assert run(doc) == [
        "error: $.metadata.name: RayJob name should be a valid DNS1035 label: [a DNS-1035 label "
        "must consist of lower case alphanumeric characters or '-', start with an alphabetic "
        "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex "
        "used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')]"
    ]


def test_generate_name_is_refused():
    doc = rayjob()
    doc["metadata"] = {"generateName": "job-"}
    assert run(doc) == [
        "error: $.metadata.generateName: generateName is not supported: kuberay render needs "
        "fixed names for GitOps; set metadata.name instead"
    ]


def test_managed_by_multikueue_is_a_warning_only():
    doc = rayjob(managedBy="kueue.x-k8s.io/multikueue", suspend=True, backoffLimit=-1)
    assert run(doc) == [
        'warning: $.spec.managedBy: managedBy is "kueue.x-k8s.io/multikueue": KubeRay ignores a '
        'RayJob that is not managed by "ray.io/kuberay-operator", and so does kuberay render: '
        "nothing is rendered for it"
    ]
    assert run(rayjob(managedBy="ray.io/kuberay-operator")) == []


def test_suspend_needs_shutdown_after_job_finishes():
    assert run(rayjob(suspend=True)) == [
        "error: $.spec.suspend: a RayJob with shutdownAfterJobFinishes set to false is not "
        "allowed to be suspended; set shutdownAfterJobFinishes: true"
    ]
    assert run(rayjob(suspend=True, shutdownAfterJobFinishes=True)) == []


def test_ttl_rules():
    assert run(rayjob(ttlSecondsAfterFinished=-1, shutdownAfterJobFinishes=True)) == [
        "error: $.spec.ttlSecondsAfterFinished: TTLSecondsAfterFinished must be a non-negative "
        "integer"
    ]
    assert run(rayjob(ttlSecondsAfterFinished=10)) == [
        "error: $.spec.ttlSecondsAfterFinished: a RayJob with shutdownAfterJobFinishes set to "
        "false cannot have TTLSecondsAfterFinished; set shutdownAfterJobFinishes: true or remove "
        "ttlSecondsAfterFinished"
    ]
    assert run(rayjob(ttlSecondsAfterFinished=10, shutdownAfterJobFinishes=True)) == []


def test_deletion_strategy_needs_its_gate():
    doc = rayjob(deletionStrategy={"deletionRules": [rule("DeleteCluster", jobStatus="FAILED")]})
    assert run(doc) == []
    assert run(doc, RayJobDeletionPolicy=False) == [
        f"error: {DS}: RayJobDeletionPolicy feature gate must be enabled to use DeletionStrategy; "
        "enable it with --feature-gates RayJobDeletionPolicy=true"
    ]


def test_deletion_rules_exclude_shutdown_and_legacy_policies():
    rules = [rule("DeleteCluster", jobStatus="FAILED")]
    assert run(
        rayjob(shutdownAfterJobFinishes=True, deletionStrategy={"deletionRules": rules})
    ) == [
        "error: $.spec.shutdownAfterJobFinishes: spec.shutdownAfterJobFinishes and "
        "spec.deletionStrategy.deletionRules are mutually exclusive; remove "
        "shutdownAfterJobFinishes"
    ]
    mixed = {"deletionRules": rules, "onSuccess": {"policy": "DeleteCluster"}}
    assert run(rayjob(deletionStrategy=mixed)) == [
        f"error: {DS}: cannot use both legacy onSuccess/onFailure fields and deletionRules "
        "simultaneously; keep only deletionRules"
    ]


def test_empty_deletion_strategy():
    assert run(rayjob(deletionStrategy={})) == [
        f"error: {DS}: DeletionStrategy requires either BOTH onSuccess and onFailure, OR the "
        "deletionRules field (cannot be empty)"
    ]


def test_legacy_policies_need_both_sides_with_a_policy():
    assert run(rayjob(deletionStrategy={"onSuccess": {"policy": "DeleteCluster"}})) == [
        f"error: {DS}: both DeletionStrategy.OnSuccess and DeletionStrategy.OnFailure must be set "
        "when using the legacy deletion policy fields of DeletionStrategy"
    ]
    doc = rayjob(deletionStrategy={"onSuccess": {}, "onFailure": {}})
    assert run(doc) == [
        f"error: {DS}.onSuccess: the DeletionPolicyType field of DeletionStrategy.OnSuccess "
        "cannot be unset when DeletionStrategy is enabled; set onSuccess.policy",
        f"error: {DS}.onFailure: the DeletionPolicyType field of DeletionStrategy.OnFailure "
        "cannot be unset when DeletionStrategy is enabled; set onFailure.policy",
    ]
    valid = {"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteNone"}}
    assert run(rayjob(deletionStrategy=valid)) == []


def test_legacy_policies_with_cluster_selector_autoscaling_and_shutdown():
    selector = rayjob(
        clusterSelector={"ray.io/cluster": "shared"},
        deletionStrategy={
            "onSuccess": {"policy": "DeleteWorkers"},
            "onFailure": {"policy": "DeleteCluster"},
        },
    )
    assert run(selector) == [
        f"error: {DS}.onSuccess.policy: the ClusterSelector mode doesn't support "
        "DeletionStrategy=DeleteWorkers on success",
        f"error: {DS}.onFailure.policy: the ClusterSelector mode doesn't support "
        "DeletionStrategy=DeleteCluster on failure",
    ]
    harmless = rayjob(
        clusterSelector={"ray.io/cluster": "shared"},
        deletionStrategy={
            "onSuccess": {"policy": "DeleteSelf"},
            "onFailure": {"policy": "DeleteNone"},
        },
    )
    assert run(harmless) == []
    autoscaling = rayjob(
        rayClusterSpec=autoscaled()["spec"],
        shutdownAfterJobFinishes=True,
        deletionStrategy={
            "onSuccess": {"policy": "DeleteWorkers"},
            "onFailure": {"policy": "DeleteNone"},
        },
    )
    assert run(autoscaling) == [
        f"error: {DS}.onSuccess.policy: DeletionStrategy=DeleteWorkers currently does not support "
        "RayCluster with autoscaling enabled",
        f"error: {DS}.onFailure.policy: shutdownAfterJobFinishes is set to 'true' while deletion "
        "policy is 'DeleteNone'; choose another policy or remove shutdownAfterJobFinishes",
    ]


def test_deletion_rule_conditions():
    rules = [
        rule("DeleteCluster", jobStatus="FAILED", jobDeploymentStatus="Failed"),
        rule("DeleteCluster"),
        rule("DeleteSelf", -1, jobStatus="FAILED"),
        rule("DeleteNone", 0, jobStatus="SUCCEEDED"),
    ]
    assert run(rayjob(deletionStrategy={"deletionRules": rules})) == [
        f"error: {DS}.deletionRules[0].condition: deletionRules[0]: cannot set both JobStatus and "
        "JobDeploymentStatus at the same time",
        f"error: {DS}.deletionRules[1].condition: deletionRules[1]: exactly one of JobStatus and "
        "JobDeploymentStatus must be set",
        f"error: {DS}.deletionRules[2].condition.ttlSeconds: deletionRules[2]: TTLSeconds must be "
        "non-negative",
    ]


def test_deletion_rules_with_cluster_selector_and_autoscaling():
    rules = [rule("DeleteCluster", jobStatus="FAILED"), rule("DeleteSelf", jobStatus="FAILED")]
    doc = rayjob(
        clusterSelector={"ray.io/cluster": "shared"}, deletionStrategy={"deletionRules": rules}
    )
    del doc["spec"]["rayClusterSpec"]
    assert run(doc) == [
        f"error: {DS}.deletionRules[0].policy: deletionRules[0]: DeletionPolicyType "
        "'DeleteCluster' not supported when ClusterSelector is set"
    ]
    doc = rayjob(
        rayClusterSpec=cluster_spec(enableInTreeAutoscaling=True),
        deletionStrategy={"deletionRules": [rule("DeleteWorkers", jobStatus="FAILED")]},
    )
    assert run(doc)[0] == (
        f"error: {DS}.deletionRules[0].policy: deletionRules[0]: DeletionPolicyType "
        "'DeleteWorkers' not supported with autoscaling enabled"
    )


def test_deletion_rules_must_be_unique_and_ttls_ordered():
    rules = [
        rule("DeleteSelf", 10, jobStatus="FAILED"),
        rule("DeleteCluster", 20, jobStatus="FAILED"),
        rule("DeleteWorkers", 30, jobStatus="FAILED"),
        rule("DeleteSelf", 5, jobStatus="FAILED"),
        rule("DeleteWorkers", 60, jobDeploymentStatus="Failed"),
        rule("DeleteSelf", jobDeploymentStatus="Failed"),
        rule("DeleteNone", 0, jobStatus="SUCCEEDED"),
    ]
    assert run(rayjob(deletionStrategy={"deletionRules": rules})) == [
        f"error: {DS}.deletionRules[3]: deletionRules[3]: duplicate rule for DeletionPolicyType "
        "'DeleteSelf' and JobStatus 'FAILED'",
        f"error: {DS}.deletionRules[1].condition.ttlSeconds: for JobStatus 'FAILED': "
        "DeleteCluster TTL (20) must be >= DeleteWorkers TTL (30)",
        f"error: {DS}.deletionRules[0].condition.ttlSeconds: for JobStatus 'FAILED': "
        "DeleteSelf TTL (10) must be >= DeleteCluster TTL (20)",
        f"error: {DS}.deletionRules[5].condition.ttlSeconds: for JobDeploymentStatus 'Failed': "
        "DeleteSelf TTL (0) must be >= DeleteWorkers TTL (60)",
    ]
    ordered = [
        rule("DeleteWorkers", 10, jobStatus="FAILED"),
        rule("DeleteCluster", 10, jobStatus="FAILED"),
        rule("DeleteSelf", 30, jobStatus="FAILED"),
    ]
    assert run(rayjob(deletionStrategy={"deletionRules": ordered})) == []


def test_duplicate_deployment_status_rule():
    rules = [rule("DeleteSelf", jobDeploymentStatus="Failed")] * 2
    assert run(rayjob(deletionStrategy={"deletionRules": rules})) == [
        f"error: {DS}.deletionRules[1]: deletionRules[1]: duplicate rule for DeletionPolicyType "
        "'DeleteSelf' and JobDeploymentStatus 'Failed'"
    ]


def test_cluster_selector_rules():
    doc = rayjob(
        clusterSelector={"ray.io/cluster": ""},
        suspend=True,
        shutdownAfterJobFinishes=True,
        submissionMode="SidecarMode",
        backoffLimit=2,
    )
    del doc["spec"]["rayClusterSpec"]
    assert run(doc) == [
        "error: $.spec.suspend: the ClusterSelector mode doesn't support the suspend operation",
        'error: $.spec.clusterSelector["ray.io/cluster"]: cluster name in ClusterSelector should '
        'not be empty; set clusterSelector["ray.io/cluster"] to the name of the RayCluster',
        "error: $.spec.submissionMode: ClusterSelector is not supported in SidecarMode",
        "error: $.spec.backoffLimit: BackoffLimit is incompatible with ClusterSelector mode; "
        "remove backoffLimit",
    ]
    other_key = rayjob(clusterSelector={"team": "a"})
    assert run(other_key) == [
        "error: $.spec.clusterSelector: cluster name in ClusterSelector should not be empty; set "
        'clusterSelector["ray.io/cluster"] to the name of the RayCluster'
    ]
    good = rayjob(clusterSelector={"ray.io/cluster": "shared"})
    del good["spec"]["rayClusterSpec"]
    assert run(good) == []


def test_cluster_spec_or_selector_is_required():
    doc = rayjob(clusterSelector={})
    del doc["spec"]["rayClusterSpec"]
    assert run(doc) == [
        "error: $.spec: one of RayClusterSpec or ClusterSelector must be set; add "
        "spec.rayClusterSpec"
    ]


def test_interactive_mode_has_no_retries():
    assert run(rayjob(submissionMode="InteractiveMode", backoffLimit=1)) == [
        "error: $.spec.backoffLimit: BackoffLimit is incompatible with InteractiveMode; remove "
        "backoffLimit"
    ]
    assert run(rayjob(submissionMode="InteractiveMode", backoffLimit=0)) == []
    assert run(rayjob(backoffLimit=3)) == []


def test_sidecar_mode_rules():
    doc = rayjob(
        submissionMode="SidecarMode",
        submitterPodTemplate=pod(),
        submitterConfig={"backoffLimit": 1},
        rayClusterSpec=cluster_spec(headGroupSpec=head(template=pod(restartPolicy="Always"))),
    )
    assert run(doc) == [
        "error: $.spec.submitterPodTemplate: currently, SidecarMode doesn't support "
        "SubmitterPodTemplate; remove submitterPodTemplate",
        "error: $.spec.submitterConfig: currently, SidecarMode doesn't support SubmitterConfig; "
        "remove submitterConfig",
        "error: $.spec.rayClusterSpec.headGroupSpec.template.spec.restartPolicy: restartPolicy for "
        "head Pod should be Never or unset when using SidecarMode",
    ]
    never = rayjob(
        submissionMode="SidecarMode",
        rayClusterSpec=cluster_spec(headGroupSpec=head(template=pod(restartPolicy="Never"))),
    )
    assert run(never) == []


def test_k8s_token_auth_is_refused_for_jobs():
    doc = rayjob(
        rayClusterSpec=cluster_spec(
            rayVersion="2.55.0", authOptions={"mode": "token", "enableK8sTokenAuth": True}
        )
    )
    assert run(doc) == [
        "error: $.spec.rayClusterSpec.authOptions.enableK8sTokenAuth: K8s token auth mode is "
        "currently not supported for RayJob; remove enableK8sTokenAuth"
    ]


def test_cluster_rules_run_on_the_embedded_spec_with_job_creator():
    doc = rayjob(
        rayClusterSpec=cluster_spec(
            upgradeStrategy={"type": "Recreate"},
            headGroupSpec=head(template=pod(ray_container(env=[{"name": "REDIS_USERNAME"}]))),
        )
    )
    assert run(doc) == [
        "error: $.spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].env[0]: cannot "
        "set redis username in rayStartParams or environment variables - use "
        "GcsFaultToleranceOptions.RedisUsername instead",
        "error: $.spec.rayClusterSpec.upgradeStrategy.type: upgradeStrategy cannot be set when "
        "RayCluster is created by RayJob; remove upgradeStrategy from the cluster spec",
    ]


def test_cluster_rules_see_the_job_annotations():
    doc = rayjob(
        rayClusterSpec=cluster_spec(
            gcsFaultToleranceOptions={"redisAddress": "r:6379", "externalStorageNamespace": "n"}
        )
    )
    doc["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    assert [line.split(": ")[1] for line in run(doc)] == [
        '$.metadata.annotations["ray.io/ft-enabled"]'
    ]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("- pip", "expected a mapping, got list"),
        ("just text", "expected a mapping, got str"),
        ("pip: [a", "expected ',' or ']', but got '<stream end>'"),
    ],
)
def test_runtime_env_yaml_must_be_a_mapping(text, reason):
    shown = '"' + text + '"'
    assert run(rayjob(runtimeEnvYAML=text)) == [
        f"error: $.spec.runtimeEnvYAML: failed to unmarshal RuntimeEnvYAML: {shown}: {reason}; "
        "runtimeEnvYAML must be a YAML mapping"
    ]


@pytest.mark.parametrize(
    "text", ["", "null", "pip:\n  - requests\nenv_vars: {A: b}\n", "a: 1\na: 2\n"]
)
def test_runtime_env_yaml_valid_values(text):
    assert run(rayjob(runtimeEnvYAML=text)) == []


def test_deadlines_and_backoff_must_be_positive():
    doc = rayjob(activeDeadlineSeconds=0, preRunningDeadlineSeconds=-1, backoffLimit=-1)
    assert run(doc) == [
        "error: $.spec.activeDeadlineSeconds: activeDeadlineSeconds must be a positive integer, "
        "got 0",
        "error: $.spec.preRunningDeadlineSeconds: preRunningDeadlineSeconds must be a positive "
        "integer, got -1",
        "error: $.spec.backoffLimit: backoffLimit must be a positive integer, got -1",
    ]
    assert run(rayjob(activeDeadlineSeconds=60, preRunningDeadlineSeconds=30)) == []
