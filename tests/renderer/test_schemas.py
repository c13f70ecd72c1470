"""Tests for renderer.schemas and the packaged schemas in schemas/.

The upstream KubeRay v1.7 CRDs and samples are read in place from the shared folder
(`KUBERAY_SHARED`, else `<repo>/../shared`); nothing of theirs is copied into the project.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from ruamel.yaml import YAML

from renderer import schemas
from renderer.errors import JsonPath, Problem

Manifest = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("KUBERAY_SHARED", REPO.parent / "shared")).resolve()
UPSTREAM = SHARED / "upstream" / "kuberay-v1.7"
CRD_FILES = {
    "RayCluster": "ray.io_rayclusters.yaml",
    "RayJob": "ray.io_rayjobs.yaml",
    "RayService": "ray.io_rayservices.yaml",
    "RayCronJob": "ray.io_raycronjobs.yaml",
}
LATEST = schemas.kubernetes_versions()[-1]

# Samples that are valid for `kubectl create` but not for a GitOps repository.
GENERATE_NAME = [
    Problem(("metadata",), 'missing required field "name"'),
    Problem(
        ("metadata", "generateName"),
        'generateName is not supported: an object kept in git needs a fixed "name"',
    ),
]
SAMPLE_DEVIATIONS = {
    "pytorch-resnet-image-classifier/ray-job.pytorch-image-classifier.yaml": GENERATE_NAME,
    "pytorch-text-classifier/ray-job.pytorch-distributed-training.yaml": GENERATE_NAME,
    "ray-job.kueue-toy-sample.yaml": GENERATE_NAME,
}


# --- helpers -------------------------------------------------------------------------------


@functools.cache
def crd_document(kind: str) -> Manifest:
    text = (UPSTREAM / "crds" / CRD_FILES[kind]).read_text(encoding="utf-8")
    crd: Manifest = yaml.load(text, Loader=yaml.CSafeLoader)
    return crd


def crd_schema(kind: str) -> Manifest:
    crd = crd_document(kind)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema: Manifest = version["schema"]["openAPIV3Schema"]
    return schema


@functools.cache
def k8s_definitions(version: str = LATEST) -> Manifest:
    spec = importlib.util.find_spec("kubernetes_validate")
    assert spec is not None
    assert spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"
    (folder,) = root.glob(f"v{version}.*-local-strict")
    defs: Manifest = json.loads((folder / "_definitions.json").read_text(encoding="utf-8"))["$defs"]
    return defs


def resolve(node: Manifest, root: Manifest) -> Manifest:
    while "$ref" in node and "x-kubernetes-type" not in node:
        ref = node["$ref"]
        assert ref.startswith("#/$defs/"), ref
        node = root["$defs"][ref.removeprefix("#/$defs/")]
    return node


@functools.cache
def sample_documents() -> list[tuple[str, int, Manifest]]:
    found = []
    for path in sorted((UPSTREAM / "samples").rglob("*.y*ml")):
        name = path.relative_to(UPSTREAM / "samples").as_posix()
        text = path.read_text(encoding="utf-8")
        for index, document in enumerate(yaml.load_all(text, Loader=yaml.CSafeLoader)):
            if document:
                found.append((name, index, document))
    return found


def ray_samples() -> list[tuple[str, int, Manifest]]:
    return [s for s in sample_documents() if str(s[2].get("apiVersion")).startswith("ray.io/")]


def other_samples() -> list[tuple[str, int, Manifest]]:
    return [s for s in sample_documents() if not str(s[2].get("apiVersion")).startswith("ray.io/")]


def raycluster() -> Manifest:
    """A valid RayCluster with a head and two worker groups."""
    container = {
        "name": "ray-head",
        "image": "rayproject/ray:2.52.0",
        "ports": [{"containerPort": 6379, "name": "gcs"}],
        "resources": {"limits": {"cpu": "1", "memory": "2Gi"}, "requests": {"cpu": "500m"}},
        "env": [{"name": "A", "value": "b"}],
    }
    worker = {
        "groupName": "small",
        "replicas": 1,
        "minReplicas": 0,
        "maxReplicas": 4,
        "rayStartParams": {"num-cpus": "1"},
        "template": {"spec": {"containers": [dict(copy.deepcopy(container), name="ray-worker")]}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "demo", "namespace": "ml", "labels": {"team": "a"}},
        "spec": {
            "rayVersion": "2.52.0",
            "headGroupSpec": {
                "serviceType": "ClusterIP",
                "rayStartParams": {"dashboard-host": "0.0.0.0"},
                "template": {
                    "metadata": {"labels": {"app": "demo"}},
                    "spec": {
                        "containers": [copy.deepcopy(container)],
                        "volumes": [{"name": "logs", "emptyDir": {}}],
                    },
                },
            },
            "workerGroupSpecs": [worker, dict(copy.deepcopy(worker), groupName="large")],
        },
    }


def messages(document: Manifest) -> list[tuple[JsonPath, str]]:
    return [(problem.path, problem.message) for problem in schemas.check(document)]


# --- the schemas against the upstream CRDs -------------------------------------------------


def compare(crd: Manifest, ours: Manifest, root: Manifest, path: str, found: list[str]) -> None:
    """Append to `found` every difference between a CRD subtree and our schema."""
    ours = resolve(ours, root)
    if path == "metadata":
        # The CRD leaves metadata to the API server; ours is our own ObjectMeta for git.
        assert crd == {"type": "object"}
        assert ours["type"] == "object"
        return
    if "x-kubernetes-type" in ours:
        check_embedded(crd, ours["x-kubernetes-type"], path, found)
        return
    if crd.get("x-kubernetes-int-or-string"):
        if ours.get("anyOf") != [{"type": "integer"}, {"type": "string"}]:
            found.append(f"{path}: not int-or-string")
    elif crd.get("type") != ours.get("type"):
        found.append(f"{path}: type {ours.get('type')!r}, CRD has {crd.get('type')!r}")
    rules = {rule["rule"] for rule in crd.get("x-kubernetes-validations", [])}
    check_rules(rules, ours, path, found)
    if "enum" in crd and crd["enum"] != ours.get("enum"):
        found.append(f"{path}: enum {ours.get('enum')!r}, CRD has {crd['enum']!r}")
    if "enum" not in crd and "enum" in ours and not any(" in [" in rule for rule in rules):
        found.append(f"{path}: enum {ours['enum']!r} that the CRD does not have")
    for keyword in ("format", "default", "minItems", "minLength", "pattern"):
        if crd.get(keyword) != ours.get(keyword):
            found.append(f"{path}: {keyword} {ours.get(keyword)!r}, CRD has {crd.get(keyword)!r}")
    if "minimum" in crd and crd["minimum"] != ours.get("minimum"):
        found.append(f"{path}: minimum {ours.get('minimum')!r}, CRD has {crd['minimum']!r}")
    crd_props: Manifest = crd.get("properties", {})
    our_props: Manifest = ours.get("properties", {})
    # A required field with a default may be left out: the API server defaults first.
    required = [name for name in crd.get("required", []) if "default" not in crd_props[name]]
    if required != ours.get("required", []):
        found.append(f"{path}: required {ours.get('required')!r}, CRD requires {required!r}")
    for name, child in crd_props.items():
        if name not in our_props:
            found.append(f"{path}.{name}: missing from our schema")
        else:
            compare(child, our_props[name], root, f"{path}.{name}", found)
    for name in our_props.keys() - crd_props.keys():
        found.append(f"{path}.{name}: in our schema but not in the CRD")
    if crd_props and ours.get("additionalProperties") is not False:
        found.append(f"{path}: additionalProperties is not false")
    if isinstance(crd.get("additionalProperties"), dict):
        extra = ours.get("additionalProperties")
        if not isinstance(extra, dict):
            found.append(f"{path}: not a map")
        else:
            compare(crd["additionalProperties"], extra, root, f"{path}.*", found)
    if "items" in crd:
        compare(crd["items"], ours.get("items", {}), root, f"{path}[]", found)


def check_rules(rules: set[str], ours: Manifest, path: str, found: list[str]) -> None:
    """Every CEL rule of the CRD has its JSON Schema translation in ours."""
    for rule in rules:
        if rule == "self == oldSelf":
            ok = ours.get("x-immutable") is True
        elif rule.startswith("self in ["):
            values = [v.strip(" '") for v in rule.removeprefix("self in [").rstrip("]").split(",")]
            ok = ours.get("enum") == values
        elif "deletionRules" in rule:
            ok = "anyOf" in ours and "anyOf" in ours.get("x-messages", {})
        elif "jobDeploymentStatus" in rule:
            ok = ours.get("oneOf") == [
                {"required": ["jobStatus"]},
                {"required": ["jobDeploymentStatus"]},
            ]
        else:
            ok = False
        if not ok:
            found.append(f"{path}: CEL rule {rule!r} is not expressed in our schema")


def check_embedded(crd: Manifest, name: str, path: str, found: list[str]) -> None:
    """The CRD subtree really is the Kubernetes type `name` (a field-by-field subset)."""
    defs = k8s_definitions()
    definition = defs.get(name)
    if definition is None:
        found.append(f"{path}: unknown Kubernetes type {name}")
        return
    theirs = set(definition.get("properties", {}))
    if len(set(crd.get("properties", {}))) * 2 < len(theirs):
        found.append(f"{path}: too few of the fields of {name}")
    check_subset(crd, definition, defs, f"{path} ({name})", found)


def check_subset(
    crd: Manifest, definition: Manifest, defs: Manifest, path: str, found: list[str]
) -> None:
    while "$ref" in definition:
        definition = defs[definition["$ref"].removeprefix("#/$defs/")]
    theirs: Manifest = definition.get("properties", {})
    for field, child in crd.get("properties", {}).items():
        if field not in theirs:
            found.append(f"{path}.{field}: not a field of the Kubernetes type")
        else:
            check_subset(child, theirs[field], defs, f"{path}.{field}", found)
    if "items" in crd and "items" in definition:
        check_subset(crd["items"], definition["items"], defs, f"{path}[]", found)
    extra = crd.get("additionalProperties")
    if isinstance(extra, dict) and isinstance(definition.get("additionalProperties"), dict):
        check_subset(extra, definition["additionalProperties"], defs, f"{path}.*", found)


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_schema_covers_every_crd_field_with_the_same_type_and_enum(kind: str) -> None:
    crd = crd_schema(kind)
    ours = schemas.schema_for(kind)
    found: list[str] = []
    for top in ("metadata", "spec"):
        compare(crd["properties"][top], ours["properties"][top], ours, top, found)
    assert found == []


def test_comparison_reports_a_missing_field_by_path() -> None:
    ours = copy.deepcopy(schemas.schema_for("RayCluster"))
    del ours["$defs"]["WorkerGroupSpec"]["properties"]["numOfHosts"]
    ours["$defs"]["HeadGroupSpec"]["properties"]["serviceType"]["type"] = "integer"
    found: list[str] = []
    compare(
        crd_schema("RayCluster")["properties"]["spec"],
        ours["properties"]["spec"],
        ours,
        "spec",
        found,
    )
    assert found == [
        "spec.headGroupSpec.serviceType: type 'integer', CRD has 'string'",
        "spec.workerGroupSpecs[].numOfHosts: missing from our schema",
    ]


def test_comparison_rejects_an_embedded_type_that_is_not_that_type() -> None:
    crd = crd_schema("RayCluster")["properties"]["spec"]["properties"]["headGroupSpec"]
    found: list[str] = []
    check_embedded(crd["properties"]["template"], "io.k8s.api.core.v1.Service", "template", found)
    assert (
        "template (io.k8s.api.core.v1.Service).spec.containers: not a field of the Kubernetes type"
        in found
    )


def test_every_ray_object_is_closed() -> None:
    def walk(node: object, path: str) -> Iterator[str]:
        if isinstance(node, dict):
            if "properties" in node and node.get("additionalProperties") is not False:
                yield path
            for key, value in node.items():
                yield from walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from walk(value, f"{path}/{index}")

    for kind in schemas.RAY_KINDS:
        assert list(walk(schemas.schema_for(kind), kind)) == []


def test_packaged_schemas_are_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location("gen_schemas", REPO / "tools" / "gen_schemas.py")
    assert spec is not None
    assert spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    texts = generator.generate({kind: crd_document(kind) for kind in CRD_FILES}, k8s_definitions())
    for name, text in texts.items():
        assert (REPO / "schemas" / name).read_text(encoding="utf-8") == text, f"regenerate {name}"
    assert sorted(texts) == sorted(schemas.RAY_KINDS.values())


def test_schemas_are_valid_draft_2020_12() -> None:
    for kind in schemas.RAY_KINDS:
        Draft202012Validator.check_schema(schemas.schema_for(kind))


# --- the samples ---------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "index", "document"), ray_samples(), ids=lambda v: str(v)[:70])
def test_upstream_ray_samples_pass(name: str, index: int, document: Manifest) -> None:
    assert schemas.check(document) == SAMPLE_DEVIATIONS.get(name, [])


def test_upstream_samples_cover_every_kind() -> None:
    kinds = {document["kind"] for _, _, document in ray_samples()}
    assert kinds == set(schemas.RAY_KINDS)


@pytest.mark.parametrize(("name", "index", "document"), other_samples(), ids=lambda v: str(v)[:70])
def test_upstream_core_samples_pass_the_kubernetes_schemas(
    name: str, index: int, document: Manifest
) -> None:
    assert schemas.check(document) == []
    assert schemas.check_kubernetes_object(document) == []


def test_samples_loaded_round_trip_by_ruamel_pass() -> None:
    path = UPSTREAM / "samples" / "ray-cluster.complete.yaml"
    loader = YAML()
    for document in loader.load_all(io.StringIO(path.read_text(encoding="utf-8"))):
        assert schemas.check(document) == []


# --- messages ------------------------------------------------------------------------------


def test_valid_raycluster_has_no_problems() -> None:
    assert schemas.check(raycluster()) == []


def test_unknown_field_names_the_nearest_field() -> None:
    doc = raycluster()
    doc["spec"]["workerGroupSpec"] = doc["spec"].pop("workerGroupSpecs")
    assert messages(doc) == [
        (
            ("spec", "workerGroupSpec"),
            'unknown field "workerGroupSpec"; did you mean "workerGroupSpecs"?',
        )
    ]


def test_unknown_field_without_a_near_name_has_no_suggestion() -> None:
    doc = raycluster()
    doc["spec"]["flavour"] = "vanilla"
    assert messages(doc) == [(("spec", "flavour"), 'unknown field "flavour"')]


def test_unknown_field_suggestion_ignores_case() -> None:
    doc = raycluster()
    doc["spec"]["RayVersion"] = doc["spec"].pop("rayVersion")
    assert messages(doc) == [
        (("spec", "RayVersion"), 'unknown field "RayVersion"; did you mean "rayVersion"?')
    ]


def test_wrong_type_says_what_was_found() -> None:
    doc = raycluster()
    doc["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    assert messages(doc) == [
        (("spec", "workerGroupSpecs", 0, "replicas"), 'expected an integer, got "two"')
    ]


def test_enum_lists_the_allowed_values() -> None:
    doc = raycluster()
    doc["spec"]["upgradeStrategy"] = {"type": "recreate"}
    assert messages(doc) == [
        (("spec", "upgradeStrategy", "type"), 'expected one of "Recreate", "None", got "recreate"')
    ]


def test_missing_required_fields_are_reported_once_per_object() -> None:
    doc = raycluster()
    del doc["spec"]["workerGroupSpecs"][1]["groupName"]
    del doc["spec"]["workerGroupSpecs"][1]["template"]
    assert messages(doc) == [
        (("spec", "workerGroupSpecs", 1), 'missing required fields "groupName" and "template"')
    ]


def test_missing_required_field() -> None:
    doc = raycluster()
    del doc["spec"]["workerGroupSpecs"][0]["groupName"]
    assert messages(doc) == [
        (("spec", "workerGroupSpecs", 0), 'missing required field "groupName"')
    ]


def test_defaulted_required_fields_may_be_left_out() -> None:
    doc = raycluster()
    del doc["spec"]["workerGroupSpecs"][0]["maxReplicas"]
    del doc["spec"]["workerGroupSpecs"][0]["minReplicas"]
    assert messages(doc) == []


def test_unknown_container_field_in_pod_template() -> None:
    doc = raycluster()
    doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert messages(doc) == [
        (
            ("spec", "headGroupSpec", "template", "spec", "containers", 0, "imagePullPolicyy"),
            'unknown field "imagePullPolicyy"; did you mean "imagePullPolicy"?',
        )
    ]


def test_wrong_type_in_resource_limits() -> None:
    doc = raycluster()
    limits = doc["spec"]["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]["resources"][
        "limits"
    ]
    limits["cpu"] = True
    limits["memory"] = "lots"
    where = (
        "spec",
        "workerGroupSpecs",
        1,
        "template",
        "spec",
        "containers",
        0,
        "resources",
        "limits",
    )
    assert sorted(messages(doc)) == [
        ((*where, "cpu"), "expected a string or a number, got true"),
        ((*where, "memory"), 'expected a quantity such as "500m", "2Gi" or 4, got "lots"'),
    ]


def test_resource_limits_must_be_a_mapping() -> None:
    doc = raycluster()
    doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = "4"
    assert messages(doc) == [
        (
            ("spec", "headGroupSpec", "template", "spec", "containers", 0, "resources", "limits"),
            'expected an object, got "4"',
        )
    ]


def test_null_quantity_and_int_or_string_are_accepted() -> None:
    doc = raycluster()
    container = doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"]["cpu"] = None
    container["readinessProbe"] = {"httpGet": {"port": None, "path": "/"}}
    assert messages(doc) == []
    container["readinessProbe"]["httpGet"]["port"] = 1.5
    assert messages(doc) == [
        (
            (
                "spec",
                "headGroupSpec",
                "template",
                "spec",
                "containers",
                0,
                "readinessProbe",
                "httpGet",
                "port",
            ),
            "expected a string or an integer, got 1.5",
        )
    ]


def test_int32_limits_are_enforced() -> None:
    doc = raycluster()
    doc["spec"]["workerGroupSpecs"][0]["replicas"] = 2**40
    doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"][0][
        "containerPort"
    ] = 2**31
    assert sorted(messages(doc)) == [
        (
            (
                "spec",
                "headGroupSpec",
                "template",
                "spec",
                "containers",
                0,
                "ports",
                0,
                "containerPort",
            ),
            "expected a 32-bit integer, got 2147483648",
        ),
        (
            ("spec", "workerGroupSpecs", 0, "replicas"),
            "expected a 32-bit integer, got 1099511627776",
        ),
    ]


def test_minimum_from_the_crd() -> None:
    doc: Manifest = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "job"},
        "spec": {
            "entrypoint": "python x.py",
            "preRunningDeadlineSeconds": 0,
            "deletionStrategy": {
                "deletionRules": [
                    {
                        "policy": "DeleteCluster",
                        "condition": {"jobStatus": "SUCCEEDED", "ttlSeconds": -1},
                    },
                    {"policy": "DeleteSelf", "condition": {"jobDeploymentStatus": "failed"}},
                ]
            },
        },
    }
    rule = ("spec", "deletionStrategy", "deletionRules")
    assert messages(doc) == [
        ((*rule, 0, "condition", "ttlSeconds"), "expected an integer from 0 to 2147483647, got -1"),
        ((*rule, 1, "condition", "jobDeploymentStatus"), 'expected "Failed", got "failed"'),
        (("spec", "preRunningDeadlineSeconds"), "expected an integer from 1 to 2147483647, got 0"),
    ]


def test_cel_rules_have_our_messages() -> None:
    doc: Manifest = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "job"},
        "spec": {
            "managedBy": "me",
            "deletionStrategy": {
                "onSuccess": {"policy": "DeleteCluster"},
                "deletionRules": [
                    {
                        "policy": "DeleteCluster",
                        "condition": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"},
                    }
                ],
            },
        },
    }
    assert messages(doc) == [
        (
            ("spec", "deletionStrategy", "deletionRules", 0, "condition"),
            'set exactly one of "jobStatus" and "jobDeploymentStatus"',
        ),
        (
            ("spec", "deletionStrategy"),
            'set both "onSuccess" and "onFailure", or "deletionRules" alone',
        ),
        (
            ("spec", "managedBy"),
            'expected one of "ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue", got "me"',
        ),
    ]


def test_empty_deletion_rules() -> None:
    doc: Manifest = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "job"},
        "spec": {"deletionStrategy": {"deletionRules": []}},
    }
    assert messages(doc) == [
        (("spec", "deletionStrategy", "deletionRules"), "expected at least 1 item, got 0"),
    ]


def test_metadata_rules() -> None:
    doc = raycluster()
    doc["metadata"] = {
        "name": "Bad_Name",
        "namespace": "n" * 64,
        "generateName": "demo-",
        "uid": "1234",
        "creationTimestamp": None,
        "labels": {"version": 1.0},
    }
    assert messages(doc) == [
        (
            ("metadata", "name"),
            "expected a lower-case DNS-1123 name (a-z, 0-9, '-' and '.'), got \"Bad_Name\"",
        ),
        (("metadata", "namespace"), "expected at most 63 characters, got 64"),
        (("metadata", "labels", "version"), "expected a string, got 1.0"),
        (
            ("metadata", "generateName"),
            'generateName is not supported: an object kept in git needs a fixed "name"',
        ),
        (("metadata", "uid"), "is set by the API server; remove it from the manifest"),
    ]
    doc["metadata"] = {"name": ""}
    assert messages(doc) == [(("metadata", "name"), 'expected a non-empty string, got ""')]


def test_ray_fields_do_not_accept_null() -> None:
    doc = raycluster()
    doc["spec"]["headGroupSpec"]["rayStartParams"] = None
    assert messages(doc) == [
        (("spec", "headGroupSpec", "rayStartParams"), "expected an object, got null")
    ]


def test_status_is_accepted_and_ignored() -> None:
    doc = raycluster()
    doc["status"] = {"state": "ready", "anything": [1, 2]}
    assert messages(doc) == []


def test_several_problems_are_all_reported() -> None:
    doc = raycluster()
    doc["spec"]["rayVersion"] = 2.52
    doc["spec"]["workerGroupSpecs"][0]["replicas"] = "1"
    doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["name"] = 7
    assert {problem.path for problem in schemas.check(doc)} == {
        ("spec", "rayVersion"),
        ("spec", "workerGroupSpecs", 0, "replicas"),
        ("spec", "headGroupSpec", "template", "spec", "containers", 0, "name"),
    }


# --- dispatch ------------------------------------------------------------------------------


def test_unsupported_ray_kind() -> None:
    doc = raycluster()
    doc["kind"] = "RayFoo"
    assert messages(doc) == [
        (
            ("kind",),
            'unsupported kind "RayFoo" in ray.io/v1; expected RayCluster, RayJob or RayService',
        )
    ]
    doc["kind"] = "Raycluster"
    assert messages(doc) == [
        (
            ("kind",),
            'unsupported kind "Raycluster" in ray.io/v1; '
            'expected RayCluster, RayJob or RayService; did you mean "RayCluster"?',
        )
    ]


def test_v1alpha1_asks_for_migration() -> None:
    doc = raycluster()
    doc["apiVersion"] = "ray.io/v1alpha1"
    assert messages(doc) == [
        (
            ("apiVersion",),
            'unsupported apiVersion "ray.io/v1alpha1"; migrate the manifest to "ray.io/v1"',
        )
    ]
    doc["apiVersion"] = "ray.io/v2"
    assert messages(doc) == [
        (("apiVersion",), 'unsupported apiVersion "ray.io/v2"; expected "ray.io/v1"')
    ]


def test_documents_without_apiversion_or_kind() -> None:
    assert schemas.check({"metadata": {}}) == [
        Problem((), 'missing required fields "apiVersion" and "kind"')
    ]
    assert schemas.check({"apiVersion": 1, "kind": ""}) == [
        Problem(("apiVersion",), "expected a non-empty string, got 1"),
        Problem(("kind",), 'expected a non-empty string, got ""'),
    ]
    not_a_mapping: Any = ["a"]
    assert schemas.check(not_a_mapping) == [
        Problem((), 'expected an object with apiVersion and kind, got ["a"]')
    ]


def test_other_api_groups_pass_through_check() -> None:
    assert schemas.check({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": 1}}) == []
    assert schemas.check({"apiVersion": "ray.io.example.com/v1", "kind": "X"}) == []


def test_kubernetes_version_selects_the_schemas() -> None:
    doc = raycluster()
    assert schemas.check(doc, kubernetes_version="v1.30.2") == []
    assert schemas.check(doc, kubernetes_version="1.99") == []
    with pytest.raises(ValueError, match="unsupported Kubernetes version"):
        schemas.check(doc, kubernetes_version="1.20")
    with pytest.raises(ValueError, match="invalid Kubernetes version"):
        schemas.check(doc, kubernetes_version="latest")
    assert schemas.kubernetes_versions()[0] == "1.25"


def test_fields_newer_than_the_kubernetes_version_are_unknown() -> None:
    doc = raycluster()
    # PodSpec.resources (pod-level resources) arrived in Kubernetes 1.32.
    doc["spec"]["headGroupSpec"]["template"]["spec"]["resources"] = {"limits": {"cpu": "1"}}
    assert messages(doc) == []
    assert schemas.check(doc, kubernetes_version="1.31") == [
        Problem(
            ("spec", "headGroupSpec", "template", "spec", "resources"),
            'unknown field "resources"; did you mean "resourceClaims"?',
        )
    ]


def test_schema_for_returns_the_packaged_schema() -> None:
    schema = schemas.schema_for("RayService")
    assert schema["properties"]["kind"] == {"const": "RayService"}
    assert schemas.schema_for("RayService") is schema
    with pytest.raises(KeyError):
        schemas.schema_for("Pod")


# --- whole Kubernetes objects --------------------------------------------------------------


def test_core_objects_are_checked_strictly() -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": "80", "targetPort": "http"}], "selectr": {}},
    }
    assert schemas.check_kubernetes_object(service) == [
        Problem(("spec", "ports", 0, "port"), 'expected an integer, got "80"'),
        Problem(("spec", "selectr"), 'unknown field "selectr"; did you mean "selector"?'),
    ]


def test_core_kinds_and_versions_are_known() -> None:
    assert schemas.check_kubernetes_object({"apiVersion": "v1", "kind": "Servce"}) == [
        Problem(("kind",), 'unknown kind "Servce" in v1 (Kubernetes 1.33); did you mean "Service"?')
    ]
    assert schemas.check_kubernetes_object({"apiVersion": "batch/v1beta1", "kind": "CronJob"}) == [
        Problem(
            ("apiVersion",),
            'unsupported apiVersion "batch/v1beta1" for CronJob in Kubernetes 1.33; '
            'expected "batch/v1"',
        )
    ]
    assert (
        schemas.check_kubernetes_object(
            {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {}}}
        )
        == []
    )


def test_custom_resources_are_not_checked_and_ray_objects_go_to_check() -> None:
    route = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "spec": {"x": 1}}
    assert schemas.check_kubernetes_object(route) == []
    doc = raycluster()
    doc["spec"]["suspend"] = "no"
    assert schemas.check_kubernetes_object(doc) == [
        Problem(("spec", "suspend"), 'expected a boolean, got "no"')
    ]
    assert schemas.check_kubernetes_object({"kind": "Pod"}) == [
        Problem((), 'missing required field "apiVersion"')
    ]


# --- the message translator on its own -----------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "instance", "expected"),
    [
        ({"const": "a"}, "b", [((), 'expected "a", got "b"')]),
        ({"maxItems": 1}, [1, 2], [((), "expected at most 1 item, got 2")]),
        ({"minLength": 2}, "a", [((), "expected at least 2 characters, got 1")]),
        ({"type": "number", "maximum": 3}, 4, [((), "expected a number of at most 3, got 4")]),
        ({"type": "integer", "minimum": 3}, 2, [((), "expected an integer of at least 3, got 2")]),
        ({"pattern": "^a"}, "b", [((), 'expected a string matching "^a", got "b"')]),
        (
            {"oneOf": [{"type": "string"}, {"minLength": 1}]},
            "x",
            [((), 'expected exactly one alternative to match, got "x"')],
        ),
        ({"not": {}}, 1, [((), "unexpected value 1")]),
        ({"format": "int64"}, 2**64, [((), "expected a 64-bit integer, got 18446744073709551616")]),
        (
            {"anyOf": [{"type": "string", "minLength": 3}, {"type": "object", "required": ["a"]}]},
            {"b": 1},
            [((), 'missing required field "a"')],
        ),
        ({"additionalProperties": False}, {1: 2}, [(("1",), "unknown field 1")]),
        ({"items": {"type": "string"}}, ["a", 1], [((1,), "expected a string, got 1")]),
        (
            {"anyOf": [{"type": "string", "enum": ["a"]}, {"type": "boolean"}]},
            1,
            [((), "expected a string or a boolean, got 1")],
        ),
        ({"allOf": [{"type": "string"}]}, 1, [((), "expected a string, got 1")]),
    ],
)
def test_translator_messages(
    schema: Manifest, instance: Any, expected: list[tuple[JsonPath, str]]
) -> None:
    validator = Draft202012Validator(schema, format_checker=schemas._format_checker())
    problems = schemas._explain(validator, instance)
    assert [(p.path, p.message) for p in problems] == expected
    compiled = schemas._Compiler({"": schema}).compile(schema, "")
    assert compiled(instance) is False


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"minimum": 1}, "a"),
        ({"pattern": "^a"}, 1),
        ({"minLength": 1}, 5),
        ({"items": {"type": "string"}}, "x"),
        ({"required": ["a"]}, [1]),
        ({"type": ["object", "null"], "required": ["a"]}, None),
        ({"type": ["array", "null"], "items": {"type": "string"}}, None),
        ({"enum": ["a", None]}, None),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, 1),
        ({"allOf": [{"type": "integer"}, {"minimum": 0}]}, 1.0),
        ({"format": "int32"}, "not a number"),
    ],
)
def test_keywords_that_do_not_apply_agree_with_jsonschema(schema: Manifest, instance: Any) -> None:
    assert Draft202012Validator(schema, format_checker=schemas._format_checker()).is_valid(instance)
    assert schemas._Compiler({"": schema}).compile(schema, "")(instance) is True


def test_compiler_refuses_what_it_does_not_support() -> None:
    compiler = schemas._Compiler({"": {}})
    schema: object
    for schema in (
        {"patternProperties": {}},
        {"enum": [1]},
        {"type": "tuple"},
        {"$ref": "other#/x"},
        {"$ref": "#/nope"},
        3,
    ):
        with pytest.raises(schemas.SchemaError):
            compiler.compile(schema, "")


@pytest.mark.parametrize("version", [schemas.kubernetes_versions()[0], LATEST])
def test_every_kubernetes_definition_compiles(version: str) -> None:
    major, minor = (int(part) for part in version.split("."))
    # Not lazy: each reference's target compiles (and resolves) at once.
    compiler = schemas._Compiler(schemas._Documents((major, minor)), lazy=False)
    for name in k8s_definitions(version):
        compiler.compile({"$ref": f"{schemas.K8S_DEFINITIONS_URI}#/$defs/{name}"}, "")


def test_every_packaged_schema_compiles_at_once() -> None:
    compiler = schemas._Compiler(schemas._Documents((1, 33)), lazy=False)
    for kind in schemas.RAY_KINDS:
        compiler.compile({"$ref": schemas._linked_schema(kind)["$id"]}, "")


# --- random damage never breaks the checker ------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def locations(node: object, path: JsonPath = ()) -> Iterator[JsonPath]:
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from locations(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from locations(value, (*path, index))


def lookup(document: object, path: JsonPath) -> object:
    node = document
    for step in path:
        if isinstance(node, list):
            assert isinstance(step, int)
            node = node[step]
        else:
            assert isinstance(node, dict)
            node = node[step]
    return node


@st.composite
def damaged_rayclusters(draw: st.DrawFn) -> Manifest:
    doc = raycluster()
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        where = draw(st.sampled_from(list(locations(doc))[1:]))
        parent = lookup(doc, where[:-1])
        action = draw(st.sampled_from(["replace", "delete", "add", "rename"]))
        if action == "replace" or not isinstance(parent, dict):
            assert isinstance(parent, (dict, list))
            parent[where[-1]] = draw(JSON_VALUES)  # type: ignore[index]
        elif action == "delete":
            del parent[where[-1]]
        elif action == "add":
            parent[draw(st.text(min_size=1, max_size=10))] = draw(JSON_VALUES)
        else:
            parent[f"{where[-1]}{draw(st.sampled_from(['s', 'x', '_']))}"] = parent.pop(where[-1])
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_rayclusters())
def test_damaged_documents_give_problems_with_valid_paths(doc: Manifest) -> None:
    problems = schemas.check(doc)
    reference = schemas._explainer((1, 33), "urn:kuberay-gitops:schemas:raycluster_v1")
    if doc.get("apiVersion") == "ray.io/v1" and doc.get("kind") == "RayCluster":
        # The compiled predicate and jsonschema agree on validity.
        assert (problems == []) == reference.is_valid(doc)
    assert len({problem.path for problem in problems}) == len(problems)
    for problem in problems:
        assert problem.message
        assert problem.message[0].islower() or problem.message[0] in "\"'"
        # No final period (a value cut short by `show` ends in "..." instead).
        assert problem.message.endswith("...") or not problem.message.endswith(".")
        node: object = doc
        for step in problem.path:
            if isinstance(node, list):
                assert isinstance(step, int)
                node = node[step]
            else:
                assert isinstance(node, dict)
                assert isinstance(step, str)
                node = node[step] if step in node else node[next(k for k in node if str(k) == step)]
