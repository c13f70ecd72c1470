"""Tests for renderer.rules.raycluster and renderer.rules.versions, plus the sample corpus."""

from __future__ import annotations

import copy
import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from renderer.errors import Problem, format_path
from renderer.options import RenderOptions
from renderer.rules import versions
from renderer.rules.raycluster import check_raycluster
from renderer.rules.rayjob import check_rayjob
from renderer.rules.rayservice import check_rayservice

Manifest = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KUBERAY_SHARED", REPO.parent / "shared")).resolve()
SAMPLES = SHARED / "upstream" / "kuberay-v1.7" / "samples"

ALL_GATES = {
    "RayClusterHistoryServer": True,
    "RayClusterMTLS": True,
    "RayClusterNetworkPolicy": True,
    "GCSFaultToleranceEmbeddedStorage": True,
}

# --- builders -------------------------------------------------------------------------------


def ray_container(**fields: Any) -> Manifest:
    return {"name": "ray", "image": "rayproject/ray:2.52.0", **fields}


def env(**values: str) -> list[Manifest]:
    return [{"name": name, "value": value} for name, value in values.items()]


def pod(*containers: Manifest, **fields: Any) -> Manifest:
    return {"spec": {"containers": list(containers) or [ray_container()], **fields}}


def head(**fields: Any) -> Manifest:
    return {"rayStartParams": {}, "template": pod(), **fields}


def worker(name: str = "small", **fields: Any) -> Manifest:
    return {
        "groupName": name,
        "replicas": 1,
        "minReplicas": 0,
        "maxReplicas": 3,
        "rayStartParams": {},
        "template": pod(),
        **fields,
    }


def cluster_spec(**fields: Any) -> Manifest:
    spec: Manifest = {
        "rayVersion": "2.52.0",
        "headGroupSpec": head(),
        "workerGroupSpecs": [worker()],
    }
    spec.update(fields)
    return spec


def raycluster(annotations: dict[str, str] | None = None, **fields: Any) -> Manifest:
    metadata: Manifest = {"name": "demo"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": metadata,
        "spec": cluster_spec(**fields),
    }


def with_head_env(**values: str) -> Manifest:
    return head(template=pod(ray_container(env=env(**values))))


def lines(problems: list[Problem]) -> list[str]:
    return [f"{p.severity}: {format_path(p.path)}: {p.message}" for p in problems]


def run(doc: Manifest, **gates: bool) -> list[str]:
    options = RenderOptions().with_gates(**gates) if gates else RenderOptions()
    return lines(check_raycluster(doc, options))


HEAD = "$.spec.headGroupSpec"
HEAD_POD = f"{HEAD}.template.spec"
HEAD_ENV = f"{HEAD_POD}.containers[0].env"
W0 = "$.spec.workerGroupSpecs[0]"
FT = "$.spec.gcsFaultToleranceOptions"
FT_ANN = '$.metadata.annotations["ray.io/ft-enabled"]'
NS_ANN = '$.metadata.annotations["ray.io/external-storage-namespace"]'
DNS1035 = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
AUTOSCALED_WORKER = {"resources": {"limits": {"cpu": "1"}}}


def test_valid_cluster_has_no_problems():
    assert run(raycluster()) == []


# --- metadata -------------------------------------------------------------------------------


def test_name_may_have_53_characters_but_not_54():
    doc = raycluster()
    doc["metadata"]["name"] = "a" * 53
    assert run(doc) == []
    doc["metadata"]["name"] = "a" * 54
    assert run(doc) == [
        "error: $.metadata.name: RayCluster name should be no more than 53 characters, got 54; "
        "shorten the name"
    ]


def test_name_must_be_a_dns1035_label():
    doc = raycluster()
    doc["metadata"]["name"] = "1demo"
    assert run(doc) == [
        f"error: $.metadata.name: RayCluster name should be a valid DNS1035 label: [{DNS1035}]"
    ]


def test_name_longer_than_63_also_breaks_the_label_rule():
    doc = raycluster()
    doc["metadata"]["name"] = "a" * 63 + "-"
    assert run(doc) == [
        "error: $.metadata.name: RayCluster name should be no more than 53 characters, got 64; "
        "shorten the name",
        "error: $.metadata.name: RayCluster name should be a valid DNS1035 label: [must be no "
        f"more than 63 characters {DNS1035}]",
    ]


def test_generate_name_is_refused():
    doc = raycluster()
    doc["metadata"] = {"generateName": "demo-"}
    assert run(doc) == [
        "error: $.metadata.generateName: generateName is not supported: kuberay render needs "
        "fixed names for GitOps; set metadata.name instead"
    ]


# --- managedBy ------------------------------------------------------------------------------


def test_managed_by_kuberay_is_fine():
    assert run(raycluster(managedBy="ray.io/kuberay-operator")) == []


def test_managed_by_multikueue_warns_and_skips_every_other_rule():
    doc = raycluster(managedBy="kueue.x-k8s.io/multikueue", enableInTreeAutoscaling=True)
    assert run(doc) == [
        'warning: $.spec.managedBy: managedBy is "kueue.x-k8s.io/multikueue": KubeRay ignores a '
        'RayCluster that is not managed by "ray.io/kuberay-operator", and so does kuberay render: '
        "nothing is rendered for it"
    ]


def test_managed_by_other_values_are_refused():
    assert run(raycluster(managedBy="me")) == [
        "error: $.spec.managedBy: the managedBy field value must be either "
        "'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue', got \"me\""
    ]


# --- rules 1-3: head group ------------------------------------------------------------------


def test_head_needs_a_container():
    doc = raycluster(headGroupSpec=head(template={"spec": {"containers": []}}))
    assert run(doc) == [
        f"error: {HEAD_POD}.containers: headGroupSpec should have at least one container; "
        "add the Ray container"
    ]


@pytest.mark.parametrize(
    ("params", "resources", "bad"),
    [
        ({"num-cpus": "1"}, {"CPU": "1"}, True),
        ({"resources": '{"x": 1}'}, {"x": "1"}, True),
        ({"num-cpus": ""}, {"CPU": "1"}, False),
        ({"num-cpus": "1"}, {}, False),
        ({}, {"CPU": "1"}, False),
    ],
)
def test_head_resources_in_one_place_only(params, resources, bad):
    doc = raycluster(headGroupSpec=head(rayStartParams=params, resources=resources))
    expected = [
        f"error: {HEAD}.resources: resource fields should not be set in both rayStartParams and "
        "Resources for Head group; please use only one"
    ]
    assert run(doc) == (expected if bad else [])


def test_head_labels_rule():
    doc = raycluster(
        headGroupSpec=head(
            rayStartParams={"labels": "a=b"},
            labels={"example.com/ok": "fine", "bad key!": "v", "zone": "-bad"},
        )
    )
    assert run(doc) == [
        f"error: {HEAD}.rayStartParams.labels: rayStartParams['labels'] is not supported for "
        "Head group; please use the top-level Labels field instead",
        f"error: {HEAD}.labels[\"bad key!\"]: invalid label key for Head group: 'bad key!', error: "
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
        "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
        "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        f"error: {HEAD}.labels.zone: invalid label value for key 'zone' in Head group: '-bad', "
        "error: a valid label must be an empty string or consist of alphanumeric characters, '-', "
        "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
        "'my_value',  or '12345', regex used for validation is "
        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
    ]


def test_label_key_prefix_and_length_rules():
    doc = raycluster(headGroupSpec=head(labels={"/x": "", "Bad_Prefix/x": "", "a/b/c": ""}))
    assert [line.split(", error: ")[1] for line in run(doc)] == [
        "prefix part must be non-empty",
        "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
        "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
        "'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must "
        "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
        "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with "
        "an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
    ]
    long_parts = raycluster(headGroupSpec=head(labels={"a" * 254 + "/" + "n" * 64: "", "p/": ""}))
    assert [line.split(", error: ")[1] for line in run(long_parts)] == [
        "prefix part must be no more than 253 bytes",
        "name part must be no more than 63 bytes",
        "name part must be non-empty",
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
        "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
        "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
    ]
    long_value = raycluster(headGroupSpec=head(labels={"k": "v" * 64}))
    assert run(long_value)[0].endswith("error: must be no more than 63 bytes")


# --- rule 4: worker groups ------------------------------------------------------------------


def test_worker_group_needs_a_container():
    doc = raycluster(workerGroupSpecs=[worker(template={"spec": {"containers": []}})])
    assert run(doc) == [
        f"error: {W0}.template.spec.containers: workerGroupSpec should have at least one "
        "container; add the Ray container"
    ]


def test_worker_replica_bounds():
    negative = raycluster(workerGroupSpecs=[worker(minReplicas=-1, maxReplicas=-2)])
    assert run(negative) == [
        f"error: {W0}.minReplicas: worker group small has negative minReplicas -1",
        f"error: {W0}.maxReplicas: worker group small has negative maxReplicas -2",
        f"error: {W0}.minReplicas: worker group small has minReplicas -1 greater than "
        "maxReplicas -2",
    ]
    inverted = raycluster(workerGroupSpecs=[worker(minReplicas=5, maxReplicas=3)])
    assert run(inverted) == [
        f"error: {W0}.minReplicas: worker group small has minReplicas 5 greater than maxReplicas 3"
    ]


def test_worker_replica_bounds_use_crd_defaults():
    group = worker()
    del group["minReplicas"], group["maxReplicas"]
    assert run(raycluster(workerGroupSpecs=[group])) == []
    assert run(raycluster(workerGroupSpecs=[worker(minReplicas=4)])) == [
        f"error: {W0}.minReplicas: worker group small has minReplicas 4 greater than maxReplicas 3"
    ]


def test_worker_resources_and_labels_name_the_group():
    group = worker(
        rayStartParams={"num-gpus": "1", "labels": "x=y"},
        resources={"GPU": "1"},
        labels={"ok": "y"},
    )
    assert run(raycluster(workerGroupSpecs=[group])) == [
        f"error: {W0}.resources: resource fields should not be set in both rayStartParams and "
        "Resources for small group; please use only one",
        f"error: {W0}.rayStartParams.labels: rayStartParams['labels'] is not supported for small "
        "group; please use the top-level Labels field instead",
    ]


def test_worker_idle_timeout_needs_autoscaler_v2():
    assert run(raycluster(workerGroupSpecs=[worker(idleTimeoutSeconds=-1)])) == [
        f"error: {W0}.idleTimeoutSeconds: worker group small: idleTimeoutSeconds must be "
        "non-negative, got -1"
    ]
    assert run(raycluster(workerGroupSpecs=[worker(idleTimeoutSeconds=60)])) == [
        f"error: {W0}.idleTimeoutSeconds: worker group small: idleTimeoutSeconds is set, but "
        "autoscaler v2 is not enabled. Please set .spec.autoscalerOptions.version to 'v2' (or "
        "set RAY_enable_autoscaler_v2 environment variable to 'true' in the head pod if using "
        "KubeRay < 1.4.0)"
    ]
    v2 = raycluster(
        workerGroupSpecs=[worker(idleTimeoutSeconds=60)], autoscalerOptions={"version": "v2"}
    )
    assert run(v2) == []


@pytest.mark.parametrize(
    ("version", "v2", "expected"),
    [
        (
            None,
            False,
            f"{W0}.priority: worker group small: priority is set, but RayVersion was "
            "not specified. Ray version 2.56.0 or later is required; set spec.rayVersion",
        ),
        (
            "latest",
            True,
            "$.spec.rayVersion: worker group small: priority is set, but RayVersion "
            'format is invalid: latest, could not parse "latest" as version',
        ),
        (
            "2",
            True,
            "$.spec.rayVersion: worker group small: priority is set, but RayVersion "
            'format is invalid: 2, illegal version string "2"',
        ),
        (
            "2.55.9",
            True,
            "$.spec.rayVersion: worker group small: priority is set, but minimum "
            "Ray version is 2.56.0, got 2.55.9",
        ),
        (
            "2.56.0",
            False,
            f"{W0}.priority: worker group small: priority is set to 5, but "
            "autoscaler v2 is not enabled. Priority is only supported with autoscaler v2 enabled",
        ),
        ("2.56.0", True, None),
        ("v2.57", True, None),
    ],
)
def test_worker_priority_needs_ray_2_56_and_autoscaler_v2(version, v2, expected):
    doc = raycluster(workerGroupSpecs=[worker(priority=5)])
    if version is None:
        del doc["spec"]["rayVersion"]
    else:
        doc["spec"]["rayVersion"] = version
    if v2:
        doc["spec"]["autoscalerOptions"] = {"version": "v2"}
    assert run(doc) == ([f"error: {expected}"] if expected else [])


def test_zero_priority_is_the_default_and_needs_nothing():
    doc = raycluster(workerGroupSpecs=[worker(priority=0)])
    del doc["spec"]["rayVersion"]
    assert run(doc) == []


def test_worker_group_names_must_be_unique():
    doc = raycluster(workerGroupSpecs=[worker("a"), worker("b"), worker("a")])
    assert run(doc) == [
        'error: $.spec.workerGroupSpecs[2].groupName: worker group names must be unique: "a" is '
        "also the name of workerGroupSpecs[0]; rename one of them"
    ]


# --- rules 5-12: GCS fault tolerance --------------------------------------------------------

REDIS = {"redisAddress": "redis:6379", "externalStorageNamespace": "demo"}


def test_ft_annotation_and_options_together():
    doc = raycluster(
        annotations={"ray.io/ft-enabled": "true", "ray.io/external-storage-namespace": "x"},
        gcsFaultToleranceOptions=REDIS,
    )
    assert run(doc) == [
        f"error: {FT_ANN}: ray.io/ft-enabled annotation and GcsFaultToleranceOptions are both set. "
        "Please use only GcsFaultToleranceOptions to configure GCS fault tolerance",
        f"error: {NS_ANN}: cannot set `ray.io/external-storage-namespace` annotation when "
        "GcsFaultToleranceOptions is enabled - use "
        "GcsFaultToleranceOptions.ExternalStorageNamespace instead",
    ]


def test_redis_address_env_without_ft():
    doc = raycluster(headGroupSpec=with_head_env(A="1", RAY_REDIS_ADDRESS="redis:6379"))
    assert run(doc) == [
        f"error: {HEAD_ENV}[1]: RAY_REDIS_ADDRESS is set which implicitly enables GCS fault "
        "tolerance, but GcsFaultToleranceOptions is not set. Please set GcsFaultToleranceOptions "
        "to enable GCS fault tolerance"
    ]
    legacy = raycluster(
        annotations={"ray.io/ft-enabled": "true", "ray.io/external-storage-namespace": "demo"},
        headGroupSpec=with_head_env(RAY_REDIS_ADDRESS="redis:6379"),
    )
    assert run(legacy) == []


def test_redis_ft_without_a_storage_namespace_passes_the_rules():
    # The renderer derives `<NS>/<C>` instead of KubeRay's UID (naming.default_storage_namespace).
    assert run(raycluster(annotations={"ray.io/ft-enabled": "TRUE"})) == []
    assert run(raycluster(annotations={"ray.io/ft-enabled": "false"})) == []
    assert run(raycluster(gcsFaultToleranceOptions={"redisAddress": "redis:6379"})) == []
    assert run(raycluster(gcsFaultToleranceOptions=REDIS)) == []


def test_redis_options_forbid_the_legacy_settings():
    doc = raycluster(
        gcsFaultToleranceOptions=REDIS,
        headGroupSpec=head(
            rayStartParams={"redis-password": "secret"},
            template=pod(ray_container(env=env(REDIS_PASSWORD="x", RAY_REDIS_ADDRESS="r:1"))),
        ),
    )
    assert run(doc) == [
        f"error: {HEAD}.rayStartParams.redis-password: cannot set `redis-password` in "
        "rayStartParams when GcsFaultToleranceOptions is enabled - use "
        "GcsFaultToleranceOptions.RedisPassword instead",
        f"error: {HEAD_ENV}[0]: cannot set `REDIS_PASSWORD` env var in head Pod when "
        "GcsFaultToleranceOptions is enabled - use GcsFaultToleranceOptions.RedisPassword instead",
        f"error: {HEAD_ENV}[1]: cannot set `RAY_REDIS_ADDRESS` env var in head Pod when "
        "GcsFaultToleranceOptions is enabled - use GcsFaultToleranceOptions.RedisAddress instead",
    ]


def test_redis_backend_refuses_storage():
    doc = raycluster(gcsFaultToleranceOptions={**REDIS, "backend": "redis", "storage": {}})
    assert run(doc) == [
        f"error: {FT}.storage: cannot set GcsFaultToleranceOptions.Storage when backend is "
        "'redis' - it only applies to the 'rocksdb' backend"
    ]


def test_rocksdb_backend_needs_its_gate():
    doc = raycluster(gcsFaultToleranceOptions={"backend": "rocksdb"})
    assert run(doc) == [
        f"error: {FT}.backend: the embedded RocksDB GCS fault tolerance backend "
        "(GcsFaultToleranceOptions.Backend: 'rocksdb') requires the "
        "GCSFaultToleranceEmbeddedStorage feature gate to be enabled; enable it with "
        "--feature-gates GCSFaultToleranceEmbeddedStorage=true"
    ]
    assert run(doc, GCSFaultToleranceEmbeddedStorage=True) == []


def test_rocksdb_backend_refuses_redis_fields_and_managed_storage():
    options = {
        "backend": "rocksdb",
        "redisAddress": "r:1",
        "redisUsername": {"value": "u"},
        "redisPassword": {"value": "p"},
        "externalStorageNamespace": "ns",
        "storage": {"claimName": "mine", "size": "1Gi"},
    }
    container = ray_container(
        env=env(RAY_gcs_storage="x", RAY_gcs_storage_path="/y"),
        volumeMounts=[
            {"name": "gcs-storage", "mountPath": "/z"},
            {"name": "other", "mountPath": "/data/gcs"},
            {"name": "fine", "mountPath": "/fine"},
        ],
    )
    spec = head(template=pod(container, volumes=[{"name": "a"}, {"name": "gcs-storage"}]))
    doc = raycluster(gcsFaultToleranceOptions=options, headGroupSpec=spec)
    mount = (
        'cannot set a volume mount named "gcs-storage" or mounted at /data/gcs in the head '
        "container when the embedded GCS FT backend is used - it is managed by KubeRay"
    )
    env_message = (
        "cannot set `RAY_gcs_storage` or `RAY_gcs_storage_path` env var in head Pod when the "
        "embedded GCS FT backend is used - these are managed by KubeRay"
    )
    assert run(doc, GCSFaultToleranceEmbeddedStorage=True) == [
        f"error: {FT}.redisAddress: cannot set GcsFaultToleranceOptions.RedisAddress when "
        "backend is 'rocksdb'",
        f"error: {FT}.redisUsername: cannot set GcsFaultToleranceOptions.RedisUsername when "
        "backend is 'rocksdb'",
        f"error: {FT}.redisPassword: cannot set GcsFaultToleranceOptions.RedisPassword when "
        "backend is 'rocksdb'",
        f"error: {FT}.externalStorageNamespace: cannot set "
        "GcsFaultToleranceOptions.ExternalStorageNamespace when backend is 'rocksdb'",
        f"error: {FT}.storage.claimName: GcsFaultToleranceOptions.Storage.ClaimName is mutually "
        "exclusive with size, storageClassName, and accessModes",
        f"error: {HEAD_ENV}[0]: {env_message}",
        f"error: {HEAD_ENV}[1]: {env_message}",
        f"error: {HEAD_POD}.containers[0].volumeMounts[0]: {mount}",
        f"error: {HEAD_POD}.containers[0].volumeMounts[1]: {mount}",
        f'error: {HEAD_POD}.volumes[1]: cannot set a volume named "gcs-storage" in the head Pod '
        "when the embedded GCS FT backend is used - it is managed by KubeRay",
    ]


def test_redis_username_is_refused_everywhere():
    doc = raycluster(
        headGroupSpec=head(
            rayStartParams={"redis-username": "u"},
            template=pod(ray_container(env=env(REDIS_USERNAME="u"))),
        )
    )
    message = (
        "cannot set redis username in rayStartParams or environment variables - use "
        "GcsFaultToleranceOptions.RedisUsername instead"
    )
    assert run(doc) == [
        f"error: {HEAD}.rayStartParams.redis-username: {message}",
        f"error: {HEAD_ENV}[0]: {message}",
    ]


# --- rules 13-17: suspension and the autoscaler ---------------------------------------------


def test_worker_suspend_needs_the_deletion_policy_gate():
    doc = raycluster(workerGroupSpecs=[worker(suspend=True)])
    assert run(doc) == []
    assert run(doc, RayJobDeletionPolicy=False) == [
        f"error: {W0}.suspend: worker group small can be suspended only when the "
        "RayJobDeletionPolicy feature gate is enabled; enable it with --feature-gates "
        "RayJobDeletionPolicy=true"
    ]


@pytest.mark.parametrize("value", ["1", "true"])
def test_autoscaler_v2_env_needs_autoscaling(value):
    doc = raycluster(headGroupSpec=with_head_env(RAY_enable_autoscaler_v2=value))
    assert run(doc) == [
        f"error: {HEAD_ENV}[0]: environment variable RAY_enable_autoscaler_v2 cannot be set to "
        f"'{value}' when enableInTreeAutoscaling is false. Please set enableInTreeAutoscaling: "
        "true to use autoscaler v2"
    ]


def test_autoscaler_v2_env_false_is_fine():
    assert run(raycluster(headGroupSpec=with_head_env(RAY_enable_autoscaler_v2="false"))) == []


def autoscaled(**fields: Any) -> Manifest:
    """A cluster Ray's autoscaler can read: CPUs on the head and on the worker."""
    ray = ray_container(**AUTOSCALED_WORKER)
    fields.setdefault("headGroupSpec", head(template=pod(ray)))
    fields.setdefault("workerGroupSpecs", [worker(template=pod(ray))])
    return raycluster(enableInTreeAutoscaling=True, **fields)


def test_autoscaling_is_rendered():
    assert run(autoscaled()) == []
    assert run(autoscaled(autoscalerOptions={"version": "v2"})) == []
    assert run(raycluster(enableInTreeAutoscaling=False)) == []


def test_autoscaling_rules_still_reported():
    ray = ray_container(env=env(RAY_enable_autoscaler_v2="true"), **AUTOSCALED_WORKER)
    doc = autoscaled(
        autoscalerOptions={"version": "v2"},
        headGroupSpec=head(template=pod(ray, restartPolicy="Always")),
        workerGroupSpecs=[
            worker(
                suspend=True,
                template=pod(ray_container(**AUTOSCALED_WORKER), restartPolicy="OnFailure"),
            )
        ],
    )
    assert run(doc) == [
        f"error: {W0}.suspend: worker group small cannot be suspended with Autoscaler enabled",
        f"error: {HEAD_ENV}[0]: both .spec.autoscalerOptions.version and head Pod env var "
        "RAY_enable_autoscaler_v2 are set, please only use the former",
        f"error: {HEAD_POD}.restartPolicy: restartPolicy for head Pod should be Never or unset "
        "when using autoscaler V2",
        f"error: {W0}.template.spec.restartPolicy: restartPolicy for worker group small should be "
        "Never or unset when using autoscaler V2",
    ]


V1 = (
    "error: $.spec.autoscalerOptions.version: kuberay render runs Ray's autoscaler v2 only; "
    "autoscaler v1 is not supported: set autoscalerOptions.version to v2 (or leave it unset)"
)


def test_autoscaler_v1_is_refused_and_its_restart_policy_is_a_warning():
    doc = autoscaled(
        autoscalerOptions={"version": "v1"},
        workerGroupSpecs=[
            worker(template=pod(ray_container(**AUTOSCALED_WORKER), restartPolicy="Always")),
            worker("b", template=pod(ray_container(**AUTOSCALED_WORKER))),
        ],
    )
    assert run(doc) == [
        V1,
        f"warning: {W0}.template.spec.restartPolicy: restartPolicy for worker groups [small] "
        "should be Never or unset when using autoscaler V1",
    ]


@pytest.mark.parametrize("value", ["false", "0", "no"])
def test_autoscaler_v1_by_head_env_is_refused(value):
    ray = ray_container(env=env(RAY_enable_autoscaler_v2=value), **AUTOSCALED_WORKER)
    assert run(autoscaled(headGroupSpec=head(template=pod(ray)))) == [
        f"error: {HEAD_ENV}[0]: RAY_enable_autoscaler_v2={json.dumps(value)} asks for autoscaler "
        "v1, which kuberay render does not support: set autoscalerOptions.version to v2"
    ]
    ray = ray_container(env=env(RAY_enable_autoscaler_v2="True"), **AUTOSCALED_WORKER)
    assert run(autoscaled(headGroupSpec=head(template=pod(ray)))) == []


def test_multi_host_groups_and_in_place_resize_are_refused_with_autoscaling():
    doc = autoscaled(
        annotations={"ray.io/ippr": "{}"},
        workerGroupSpecs=[
            worker(numOfHosts=2, template=pod(ray_container(**AUTOSCALED_WORKER))),
            worker("b", numOfHosts=1, template=pod(ray_container(**AUTOSCALED_WORKER))),
        ],
    )
    assert run(doc) == [
        'error: $.metadata.annotations["ray.io/ippr"]: in-place pod resize (ray.io/ippr) needs '
        "KubeRay's own autoscaler provider and is not supported by kuberay render; remove the "
        "annotation",
        f"error: {W0}.numOfHosts: worker group small has numOfHosts 2: kuberay render does not "
        "autoscale multi-host groups yet; set enableInTreeAutoscaling to false or numOfHosts to 1",
    ]


def test_an_autoscaler_image_other_than_the_heads_is_a_warning():
    assert run(autoscaled(autoscalerOptions={"image": "rayproject/ray:2.52.0"})) == []
    assert run(autoscaled(autoscalerOptions={"image": "rayproject/ray:2.53.0"})) == [
        'warning: $.spec.autoscalerOptions.image: the autoscaler image "rayproject/ray:2.53.0" '
        "differs from the head's \"rayproject/ray:2.52.0\": the autoscaler's Ray must match the "
        "GCS it talks to"
    ]


def test_resources_rays_autoscaler_cannot_read_are_refused():
    doc = raycluster(
        enableInTreeAutoscaling=True,
        headGroupSpec=head(rayStartParams={"num-cpus": "0.5"}),
        workerGroupSpecs=[
            worker(),
            worker("b", resources={"CPU": "1", "x": "lots"}),
            worker("c", rayStartParams={"resources": '"{\\"X\\": 1.5}"', "num-cpus": "1"}),
        ],
    )
    reader = "Ray's autoscaler cannot read the resources of group"
    assert run(doc) == [
        f"error: {HEAD}.rayStartParams.num-cpus: {reader} headgroup: rayStartParams num-cpus "
        '"0.5" is not an integer (Ray reads it with int())',
        f"error: {W0}.template.spec.containers[0]: Ray's autoscaler cannot detect the CPUs of "
        "group small: set the num-cpus rayStartParam or a CPU limit or request on the Ray "
        "container",
        f"error: $.spec.workerGroupSpecs[1].resources.x: {reader} b: invalid number format: lots",
        "error: $.spec.workerGroupSpecs[2].rayStartParams.resources: Ray's autoscaler cannot "
        "read the resources rayStartParam of group c: expected a quoted JSON object of integers, "
        'e.g. \'"{\\"Custom1\\": 1}"\'',
    ]


def test_autoscaler_options_idle_timeout_and_env():
    doc = raycluster(
        autoscalerOptions={
            "idleTimeoutSeconds": -5,
            "env": env(A="1", KUBERAY_GEN_AUTOSCALER_START_CMD="x"),
        }
    )
    assert run(doc) == [
        "error: $.spec.autoscalerOptions.idleTimeoutSeconds: autoscalerOptions.idleTimeoutSeconds "
        "must be non-negative, got -5",
        "error: $.spec.autoscalerOptions.env[1]: autoscalerOptions.env must not contain "
        "KUBERAY_GEN_AUTOSCALER_START_CMD: it is managed by KubeRay and injected automatically "
        "into the autoscaler container",
    ]
    assert run(raycluster(autoscalerOptions={"idleTimeoutSeconds": 0})) == []


# --- rule 18: history server ----------------------------------------------------------------

HSO = "$.spec.historyServerOptions"
COLLECTOR_ENV = f"{HSO}.collectorOptions.env"


def history(*entries: Manifest, image: str | None = "collector:1") -> Manifest:
    collector: Manifest = {"env": list(entries)}
    if image is not None:
        collector["image"] = image
    return {"collectorOptions": collector}


def test_history_server_needs_its_gate():
    doc = raycluster(historyServerOptions=history(*env(STORAGE_BACKEND="s3", S3_REGION="x")))
    assert run(doc) == [
        f"error: {HSO}: RayClusterHistoryServer feature gate is not enabled; enable it with "
        "--feature-gates RayClusterHistoryServer=true"
    ]
    assert run(doc, RayClusterHistoryServer=True) == []


def test_history_server_needs_collector_options_and_image():
    assert run(raycluster(historyServerOptions={}), RayClusterHistoryServer=True) == [
        f"error: {HSO}: historyServerOptions.collectorOptions must be set"
    ]
    doc = raycluster(
        historyServerOptions=history(*env(STORAGE_BACKEND="s3", S3_REGION="x"), image=None)
    )
    assert run(doc, RayClusterHistoryServer=True) == [
        f"error: {HSO}.collectorOptions: historyServerOptions.collectorOptions.image must be set"
    ]


def test_history_server_collector_env_rules():
    doc = raycluster(
        historyServerOptions=history(*env(POD_IP="x", EVENTS_PORT="1", STORAGE_BACKEND="s3"))
    )
    assert run(doc, RayClusterHistoryServer=True) == [
        f"error: {COLLECTOR_ENV}[0]: historyServerOptions.collectorOptions.env must not contain "
        "POD_IP: it is managed by KubeRay and injected automatically into the collector container",
        f"error: {COLLECTOR_ENV}[1]: historyServerOptions.collectorOptions.env must not contain "
        "EVENTS_PORT: it is managed by KubeRay and injected automatically into the collector "
        "container",
        f"error: {COLLECTOR_ENV}: S3_REGION environment variable must be set when STORAGE_BACKEND "
        "is S3",
    ]
    missing = raycluster(historyServerOptions=history())
    assert run(missing, RayClusterHistoryServer=True) == [
        f"error: {COLLECTOR_ENV}: STORAGE_BACKEND environment variable must be set with a literal "
        "string value in historyServerOptions.collectorOptions.env"
    ]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"STORAGE_BACKEND": "gcs"},
            "GCS_BUCKET environment variable must be set when STORAGE_BACKEND is GCS",
        ),
        ({"STORAGE_BACKEND": "GCS", "GCS_BUCKET": "b"}, None),
        (
            {"STORAGE_BACKEND": "azureblob"},
            "either AZURE_STORAGE_CONNECTION_STRING or "
            "AZURE_STORAGE_ACCOUNT_URL environment variable must be set when STORAGE_BACKEND is "
            "AZUREBLOB",
        ),
        ({"STORAGE_BACKEND": "azureblob", "AZURE_STORAGE_ACCOUNT_URL": "u"}, None),
        (
            {
                "STORAGE_BACKEND": "azureblob",
                "AZURE_STORAGE_AUTH_MODE": "Connection_String ",
                "AZURE_STORAGE_ACCOUNT_URL": "u",
            },
            "AZURE_STORAGE_CONNECTION_STRING environment "
            "variable must be set when STORAGE_BACKEND is AZUREBLOB and AZURE_STORAGE_AUTH_MODE is "
            "connection_string",
        ),
        (
            {
                "STORAGE_BACKEND": "azureblob",
                "AZURE_STORAGE_AUTH_MODE": "default",
                "AZURE_STORAGE_CONNECTION_STRING": "c",
            },
            "AZURE_STORAGE_ACCOUNT_URL environment variable "
            "must be set when STORAGE_BACKEND is AZUREBLOB and AZURE_STORAGE_AUTH_MODE is default",
        ),
        (
            {"STORAGE_BACKEND": "aliyunoss", "OSS_BUCKET": "b", "OSS_REGION": "r"},
            "OSS_ENDPOINT environment variable must be set when STORAGE_BACKEND is ALIYUNOSS",
        ),
        ({"STORAGE_BACKEND": "minio"}, None),
    ],
)
def test_history_server_backend_requirements(values, expected):
    doc = raycluster(historyServerOptions=history(*env(**values)))
    assert run(doc, RayClusterHistoryServer=True) == (
        [f"error: {COLLECTOR_ENV}: {expected}"] if expected else []
    )


def test_history_server_required_variable_may_come_from_a_secret():
    entries = [
        *env(STORAGE_BACKEND="gcs"),
        {"name": "GCS_BUCKET", "valueFrom": {"secretKeyRef": {}}},
    ]
    assert (
        run(raycluster(historyServerOptions=history(*entries)), RayClusterHistoryServer=True) == []
    )
    entries = [*env(STORAGE_BACKEND="gcs"), {"name": "GCS_BUCKET", "value": ""}]
    assert run(
        raycluster(historyServerOptions=history(*entries)), RayClusterHistoryServer=True
    ) == [
        f"error: {COLLECTOR_ENV}[1]: GCS_BUCKET environment variable must be set when "
        "STORAGE_BACKEND is GCS"
    ]


def test_history_server_refuses_a_collector_container_in_templates():
    collector = {"name": "ray-history-collector", "image": "x"}
    doc = raycluster(
        historyServerOptions=history(*env(STORAGE_BACKEND="gcs", GCS_BUCKET="b")),
        headGroupSpec=head(template=pod(ray_container(), collector)),
        workerGroupSpecs=[worker(template=pod(ray_container(), collector))],
    )
    assert run(doc, RayClusterHistoryServer=True) == [
        f"error: {HEAD_POD}.containers[1].name: head pod template must not define a container "
        "with name 'ray-history-collector' when history server collector options are enabled",
        f"error: {W0}.template.spec.containers[1].name: worker group small pod template must not "
        "define a container with name 'ray-history-collector' when history server collector "
        "options are enabled",
    ]


# --- rule 19: token authentication ----------------------------------------------------------

AUTH = "$.spec.authOptions"


@pytest.mark.parametrize(
    ("version", "auth", "expected"),
    [
        ("2.52.0", {"mode": "token", "secretName": "s"}, []),
        ("2.52.0", {"mode": "disabled"}, []),
        ("2.55.0", {"mode": "token", "enableK8sTokenAuth": True}, []),
        (
            None,
            {"mode": "token", "secretName": "s"},
            [
                f"{AUTH}.mode: authOptions.mode is 'token' but RayVersion was not specified. Ray "
                "version 2.52.0 or later is required; set spec.rayVersion"
            ],
        ),
        (
            "02.52",
            {"mode": "token", "secretName": "s"},
            [
                "$.spec.rayVersion: authOptions.mode is 'token' but RayVersion format is invalid: "
                '02.52, illegal zero-prefixed version component "02" in "02.52"'
            ],
        ),
        (
            "2.51.9",
            {"mode": "token", "secretName": "s"},
            [
                "$.spec.rayVersion: authOptions.mode is 'token' but minimum Ray version is 2.52.0, "
                "got 2.51.9"
            ],
        ),
        (
            "2.54.0",
            {"mode": "token", "enableK8sTokenAuth": True},
            [
                "$.spec.rayVersion: authOptions.enableK8sTokenAuth is enabled but minimum Ray "
                "version is 2.55.0, got 2.54.0"
            ],
        ),
        (
            "2.55.0",
            {"mode": "token", "enableK8sTokenAuth": True, "secretName": "s"},
            [
                f"{AUTH}.secretName: authOptions.enableK8sTokenAuth is enabled and "
                "authOptions.secretName is also set; remove one of them"
            ],
        ),
        (
            "2.55.0",
            {"enableK8sTokenAuth": True},
            [
                f"{AUTH}.enableK8sTokenAuth: authOptions.enableK8sTokenAuth is enabled but "
                "authOptions.mode not set to 'token'"
            ],
        ),
    ],
)
def test_token_auth_rules(version, auth, expected):
    doc = raycluster(authOptions=auth)
    if version is None:
        del doc["spec"]["rayVersion"]
    else:
        doc["spec"]["rayVersion"] = version
    assert run(doc) == [f"error: {line}" for line in expected]


@pytest.mark.parametrize("auth", [{"mode": "token"}, {}])
def test_a_random_token_secret_is_refused(auth):
    assert run(raycluster(authOptions=auth)) == [
        f"error: {AUTH}: authOptions has no secretName: KubeRay would create a Secret with a "
        "random token, which cannot live in git; create a Secret with key auth_token and set "
        "authOptions.secretName"
    ]


# --- rule 20: network policy ----------------------------------------------------------------

NP = "$.spec.networkPolicy"


def test_network_policy_needs_its_gate():
    doc = raycluster(networkPolicy={})
    assert run(doc) == [
        f"error: {NP}: spec.networkPolicy requires the RayClusterNetworkPolicy feature gate to be "
        "enabled; enable it with --feature-gates RayClusterNetworkPolicy=true"
    ]
    assert run(doc, RayClusterNetworkPolicy=True) == []


def test_network_policy_rules_must_match_the_mode():
    rules: Manifest = {"ingressRules": [{}], "egressRules": [{}]}
    egress_only = raycluster(
        networkPolicy={
            "mode": "DenyAllEgress",
            "head": rules,
            "worker": {"egressRules": [{}]},
            "workerGroups": [{"groupName": "small", **rules}],
        }
    )
    assert run(egress_only, RayClusterNetworkPolicy=True) == [
        f"error: {NP}.head.ingressRules: networkPolicy.head.ingressRules cannot be set when mode "
        'is "DenyAllEgress" (ingress is not restricted)',
        f'error: {NP}.workerGroups[0].ingressRules: networkPolicy.workerGroups["small"]'
        '.ingressRules cannot be set when mode is "DenyAllEgress" (ingress is not restricted)',
    ]
    ingress_only = raycluster(
        networkPolicy={"mode": "DenyAllIngress", "head": rules, "worker": rules}
    )
    assert run(ingress_only, RayClusterNetworkPolicy=True) == [
        f"error: {NP}.head.egressRules: networkPolicy.head.egressRules cannot be set when mode is "
        '"DenyAllIngress" (egress is not restricted)',
        f"error: {NP}.worker.egressRules: networkPolicy.worker.egressRules cannot be set when mode "
        'is "DenyAllIngress" (egress is not restricted)',
    ]
    deny_all = raycluster(networkPolicy={"head": rules, "worker": rules})
    assert run(deny_all, RayClusterNetworkPolicy=True) == []


def test_network_policy_group_names():
    doc = raycluster(
        networkPolicy={"workerGroups": [{"groupName": "gpu"}]},
        workerGroupSpecs=[worker("Small.Group")],
    )
    assert run(doc, RayClusterNetworkPolicy=True) == [
        f'error: {W0}.groupName: worker group name "Small.Group" must be a valid DNS1123 label '
        "when networkPolicy is enabled (it is embedded in the NetworkPolicy name): [a lowercase "
        "RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
        "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
        "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')]",
        f'error: {NP}.workerGroups[0].groupName: networkPolicy.workerGroups["gpu"] does not match '
        "any group name in workerGroupSpecs",
    ]
    dotted = raycluster(networkPolicy={}, workerGroupSpecs=[worker("a.b")])
    assert run(dotted, RayClusterNetworkPolicy=True)[0].endswith("[must not contain dots]")
    long = raycluster(networkPolicy={}, workerGroupSpecs=[worker("g" * 64)])
    assert run(long, RayClusterNetworkPolicy=True)[0].endswith(
        "(it is embedded in the NetworkPolicy name): [must be no more than 63 characters]"
    )


# --- rule 21: mTLS --------------------------------------------------------------------------


def test_tls_needs_its_gate():
    doc = raycluster(tlsOptions={"enabled": True})
    assert run(doc) == [
        "error: $.spec.tlsOptions: spec.tlsOptions requires the RayClusterMTLS feature gate to be "
        "enabled; enable it with --feature-gates RayClusterMTLS=true"
    ]
    assert run(doc, RayClusterMTLS=True) == []


def test_tls_refuses_managed_env_and_mounts():
    managed = "the operator manages TLS configuration automatically"
    head_container = ray_container(
        env=env(RAY_USE_TLS="1"),
        volumeMounts=[
            {"name": "ray-tls", "mountPath": "/x"},
            {"name": "y", "mountPath": "/etc/ray/tls"},
        ],
    )
    worker_container = ray_container(env=env(RAY_TLS_CA_CERT="/ca"))
    doc = raycluster(
        tlsOptions={"enabled": True},
        headGroupSpec=head(template=pod(head_container)),
        workerGroupSpecs=[worker(template=pod(worker_container))],
        autoscalerOptions={
            "env": env(RAY_TLS_SERVER_KEY="k"),
            "volumeMounts": [
                {"name": "ray-tls", "mountPath": "/a"},
                {"name": "b", "mountPath": "/etc/ray/tls"},
            ],
        },
    )
    assert run(doc, RayClusterMTLS=True) == [
        f"error: {HEAD_ENV}[0]: cannot set RAY_USE_TLS environment variable in head Pod when "
        f"tlsOptions is set - {managed}",
        f'error: {HEAD_POD}.containers[0].volumeMounts[0]: cannot use volume mount named "ray-tls" '
        f"in head Pod when tlsOptions is set - {managed}",
        f"error: {HEAD_POD}.containers[0].volumeMounts[1]: cannot use volume mount at path "
        f'"/etc/ray/tls" in head Pod when tlsOptions is set - {managed}',
        f"error: {W0}.template.spec.containers[0].env[0]: cannot set RAY_TLS_CA_CERT environment "
        f'variable in worker group "small" when tlsOptions is set - {managed}',
        "error: $.spec.autoscalerOptions.env[0]: cannot set RAY_TLS_SERVER_KEY environment "
        "variable in autoscalerOptions.env when tlsOptions is set - the operator manages TLS "
        "configuration for the autoscaler automatically",
        'error: $.spec.autoscalerOptions.volumeMounts[0]: cannot use volume mount named "ray-tls" '
        f"in autoscalerOptions.volumeMounts when tlsOptions is set - {managed}",
        "error: $.spec.autoscalerOptions.volumeMounts[1]: cannot use volume mount at path "
        f'"/etc/ray/tls" in autoscalerOptions.volumeMounts when tlsOptions is set - {managed}',
    ]
    doc["spec"]["tlsOptions"]["enabled"] = False
    assert run(doc, RayClusterMTLS=True) == []


def test_tls_skips_groups_without_containers_and_unrelated_mounts():
    empty: Manifest = {"spec": {"containers": []}}
    doc = raycluster(
        tlsOptions={"enabled": True},
        headGroupSpec=head(template=empty),
        workerGroupSpecs=[
            worker(template=empty),
            worker(
                "b", template=pod(ray_container(volumeMounts=[{"name": "x", "mountPath": "/x"}]))
            ),
        ],
    )
    assert run(doc, RayClusterMTLS=True) == [
        f"error: {HEAD_POD}.containers: headGroupSpec should have at least one container; add "
        "the Ray container",
        f"error: {W0}.template.spec.containers: workerGroupSpec should have at least one "
        "container; add the Ray container",
    ]


# --- §6.4: upgrade strategy -----------------------------------------------------------------


def test_upgrade_strategy_values():
    assert run(raycluster(upgradeStrategy={"type": "Recreate"})) == []
    assert run(raycluster(upgradeStrategy={"type": "Rolling"})) == [
        "error: $.spec.upgradeStrategy.type: Spec.UpgradeStrategy.Type value Rolling is invalid, "
        "valid options are Recreate or None"
    ]


# --- embedding ------------------------------------------------------------------------------


def embedded(**fields: Any) -> Manifest:
    return {"metadata": {"name": "job", "annotations": {}}, "spec": cluster_spec(**fields)}


def test_embedded_paths_start_at_base_and_metadata_is_not_checked():
    doc = embedded(headGroupSpec=head(template={"spec": {"containers": []}}))
    doc["metadata"]["name"] = "x" * 60
    problems = check_raycluster(
        doc, RenderOptions(), creator="RayJob", base=("spec", "rayClusterSpec")
    )
    assert [p.path for p in problems] == [
        ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "containers")
    ]


@pytest.mark.parametrize("creator", ["RayJob", "RayService"])
def test_embedded_upgrade_strategy_is_refused(creator):
    problems = check_raycluster(
        embedded(upgradeStrategy={"type": "Recreate"}),
        RenderOptions(),
        creator=creator,
        base=("spec", "x"),
    )
    assert lines(problems) == [
        f"error: $.spec.x.upgradeStrategy.type: upgradeStrategy cannot be set when RayCluster is "
        f"created by {creator}; remove upgradeStrategy from the cluster spec"
    ]
    empty = check_raycluster(
        embedded(upgradeStrategy={}), RenderOptions(), creator=creator, base=("spec", "x")
    )
    assert empty == []


def test_embedded_managed_by_multikueue_is_an_error():
    problems = check_raycluster(
        embedded(managedBy="kueue.x-k8s.io/multikueue"),
        RenderOptions(),
        creator="RayJob",
        base=("spec", "rayClusterSpec"),
    )
    assert lines(problems) == [
        'error: $.spec.rayClusterSpec.managedBy: managedBy is "kueue.x-k8s.io/multikueue": '
        "KubeRay would create a RayCluster that it does not reconcile, so the RayJob never gets "
        "Pods; remove managedBy from the cluster spec (set it on the RayJob instead)"
    ]


def test_embedded_managed_by_invalid_value_is_the_crd_error():
    problems = check_raycluster(
        embedded(managedBy="someone"), RenderOptions(), creator="RayJob", base=("spec", "r")
    )
    assert lines(problems) == [
        "error: $.spec.r.managedBy: the managedBy field value must be either "
        "'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue', got \"someone\""
    ]


def test_embedded_annotation_problems_point_at_the_owner_metadata():
    doc = embedded(gcsFaultToleranceOptions=REDIS)
    doc["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    problems = check_raycluster(doc, RenderOptions(), creator="RayService", base=("spec", "c"))
    assert [p.path for p in problems] == [("metadata", "annotations", "ray.io/ft-enabled")]


def test_checker_does_not_modify_its_input():
    doc = raycluster(enableInTreeAutoscaling=True, workerGroupSpecs=[worker(), worker()])
    before = copy.deepcopy(doc)
    run(doc)
    assert doc == before


# --- versions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("2.53.0", (2, 53, 0)),
        ("v2.53", (2, 53, 0)),
        ("2.53.0rc1", (2, 53, 0)),
        (" 2.53.1-beta ", (2, 53, 1)),
        ("2.53.1.7", (2, 53, 1)),
        ("0.1", (0, 1, 0)),
        ("2.053", (2, 53, 0)),
        ("nightly", None),
        ("", None),
        ("2", None),
        ("02.1", None),
        ("2.53\n", None),
    ],
)
def test_parse_ray_version(text, parsed):
    assert versions.parse_ray_version(text) == parsed


def test_version_errors_are_kubernetes_texts():
    assert versions.version_error("2.53.0") is None
    assert versions.version_error("x") == 'could not parse "x" as version'
    assert versions.version_error("3") == 'illegal version string "3"'
    assert (
        versions.version_error("01.2") == 'illegal zero-prefixed version component "01" in "01.2"'
    )
    huge = "1." + "9" * 30
    assert versions.version_error(huge) == (
        f'illegal non-numeric version component "{"9" * 30}" in "{huge}": strconv.ParseUint: '
        f'parsing "{"9" * 30}": value out of range'
    )


def test_at_least():
    assert versions.at_least("2.53", "2.53.0")
    assert versions.at_least("v2.54.0rc1", "2.53.0")
    assert not versions.at_least("2.52.9", "2.53.0")
    assert not versions.at_least("nightly", "2.53.0")
    with pytest.raises(ValueError, match="invalid minimum"):
        versions.at_least("2.53.0", "latest")


# --- the upstream sample corpus -------------------------------------------------------------

GATED_SAMPLES: dict[tuple[str, int], list[str]] = {
    ("ray-cluster.historyserver.yaml", 0): [
        "error: $.spec.historyServerOptions: RayClusterHistoryServer feature gate is not enabled; "
        "enable it with --feature-gates RayClusterHistoryServer=true"
    ],
    ("ray-cluster.mtls.yaml", 0): [
        "error: $.spec.tlsOptions: spec.tlsOptions requires the RayClusterMTLS feature gate to be "
        "enabled; enable it with --feature-gates RayClusterMTLS=true"
    ],
    ("ray-cluster.network-policy-deny-all.yaml", 0): [
        "error: $.spec.networkPolicy: spec.networkPolicy requires the RayClusterNetworkPolicy "
        "feature gate to be enabled; enable it with --feature-gates RayClusterNetworkPolicy=true"
    ],
}
_GENERATE_NAME = (
    "error: $.metadata.generateName: generateName is not supported: kuberay render needs fixed "
    "names for GitOps; set metadata.name instead"
)
_RANDOM_TOKEN = (
    "error: $.spec.authOptions: authOptions has no secretName: KubeRay would create a Secret with "
    "a random token, which cannot live in git; create a Secret with key auth_token and set "
    "authOptions.secretName"
)
REFUSED_SAMPLES: dict[tuple[str, int], list[str]] = {
    ("pytorch-resnet-image-classifier/ray-job.pytorch-image-classifier.yaml", 0): [_GENERATE_NAME],
    ("pytorch-text-classifier/ray-job.pytorch-distributed-training.yaml", 0): [_GENERATE_NAME],
    ("ray-job.kueue-toy-sample.yaml", 0): [_GENERATE_NAME],
    ("ray-cluster.auth.yaml", 0): [_RANDOM_TOKEN],
}
CHECKERS = {"RayCluster": check_raycluster, "RayJob": check_rayjob, "RayService": check_rayservice}


@functools.cache
def sample_documents() -> tuple[tuple[tuple[str, int], Manifest], ...]:
    found = []
    for path in sorted(SAMPLES.rglob("*.y*ml")):
        for index, doc in enumerate(YAML(typ="safe").load_all(path.read_text(encoding="utf-8"))):
            if isinstance(doc, dict) and doc.get("kind") in CHECKERS:
                found.append(((path.relative_to(SAMPLES).as_posix(), index), doc))
    return tuple(found)


def sample_results(options: RenderOptions) -> dict[tuple[str, int], list[str]]:
    return {key: lines(CHECKERS[doc["kind"]](doc, options)) for key, doc in sample_documents()}


def test_samples_pass_except_the_listed_gated_or_refused_ones():
    results = sample_results(RenderOptions())
    assert len(results) > 60
    problems = {key: found for key, found in results.items() if found}
    assert problems == {**GATED_SAMPLES, **REFUSED_SAMPLES}


def test_gated_samples_pass_with_their_gates_on():
    results = sample_results(RenderOptions().with_gates(**ALL_GATES))
    problems = {key: found for key, found in results.items() if found}
    assert problems == REFUSED_SAMPLES


# --- beyond KubeRay: literal credentials (security review L7) ---------------------------------

LITERAL = (
    "a literal Redis password{where}: it is stored in git and in the rendered Pods in plain "
    "text; use gcsFaultToleranceOptions.redisPassword.valueFrom.secretKeyRef instead"
)


def test_a_literal_redis_password_is_warned_about_but_rendered():
    doc = raycluster(gcsFaultToleranceOptions={**REDIS, "redisPassword": {"value": "hunter2"}})
    assert run(doc) == [f"warning: {FT}.redisPassword.value: " + LITERAL.format(where="")]
    legacy = raycluster(
        annotations={"ray.io/ft-enabled": "true"},
        headGroupSpec=head(rayStartParams={"redis-password": "hunter2"}),
    )
    assert run(legacy) == [
        f"warning: {HEAD}.rayStartParams.redis-password: "
        + LITERAL.format(where=" in rayStartParams")
    ]


@pytest.mark.parametrize("value", ["$REDIS_PASSWORD", "${REDIS_PASSWORD}", "$(REDIS_PASSWORD)", ""])
def test_a_variable_reference_or_a_secret_is_no_literal_password(value: str):
    by_value = raycluster(gcsFaultToleranceOptions={**REDIS, "redisPassword": {"value": value}})
    assert run(by_value) == []
    legacy = raycluster(headGroupSpec=head(rayStartParams={"redis-password": value}))
    assert run(legacy) == []
    secret = {"valueFrom": {"secretKeyRef": {"name": "redis", "key": "password"}}}
    assert run(raycluster(gcsFaultToleranceOptions={**REDIS, "redisPassword": secret})) == []


def test_autoscaling_without_containers_reports_only_the_container_rules():
    doc = autoscaled(
        headGroupSpec=head(template={"spec": {"containers": []}}),
    )
    assert run(doc) == [
        f"error: {HEAD_POD}.containers: headGroupSpec should have at least one container; add "
        "the Ray container"
    ]
    doc = autoscaled(workerGroupSpecs=[worker(template={"spec": {"containers": []}})])
    assert run(doc) == [
        f"error: {W0}.template.spec.containers: workerGroupSpec should have at least one "
        "container; add the Ray container"
    ]
