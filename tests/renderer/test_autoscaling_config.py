"""Config parity: the rendered `autoscaling.yaml` is what Ray's own derivation gives.

The oracle is Ray's `_derive_autoscaling_config_from_ray_cr` (the test dependency `ray`,
never a runtime import), fed the RayCluster the way the API server stores it: the CRD's
defaults applied (read in place from ../shared). Everything but the `provider` block must
be equal: for every upstream sample that uses autoscaling, for every other sample with
autoscaling switched on, and for fuzzed cluster specs. Where Ray's derivation raises (its
autoscaler would crash-loop), the renderer refuses the spec.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import string
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderer import compile as compiler
from renderer import sources
from renderer.errors import ManifestError
from renderer.manifest import Manifest
from renderer.objects import autoscaling, autoscalingconfig
from renderer.options import DEFAULT_FEATURE_GATES, RenderOptions
from tests.paths import SAMPLES, SHARED

CRD = SHARED / "upstream" / "kuberay-v1.7" / "crds" / "ray.io_rayclusters.yaml"
OPTIONS = RenderOptions(
    feature_gates=MappingProxyType(
        dict(DEFAULT_FEATURE_GATES)
        | {
            "RayClusterNetworkPolicy": True,
            "RayClusterMTLS": True,
            "GCSFaultToleranceEmbeddedStorage": True,
            "RayClusterHistoryServer": True,
        }
    )
)
KINDS = {"RayCluster": ("spec",), "RayJob": ("spec", "rayClusterSpec")}
KINDS["RayService"] = ("spec", "rayClusterConfig")
# The samples that use autoscaling as published, and the two whose comments say how to turn
# it on (their tests run with it on in KubeRay's e2e suite).
AUTOSCALING_SAMPLES = (
    "ray-cluster.autoscaler-v2.yaml",
    "ray-cluster.autoscaler-v2-overwrite-cmd.yaml",
    "ray-cluster-label-selector.yaml",
    "ray-cluster.auth.yaml",
    "ray-cluster.auth.secret-ref.yaml",
    "ray-service.incremental-upgrade.yaml",
    "ray-cluster.tls.yaml",
    "ray-cluster.network-policy-deny-all.yaml",
)


def ray_derive(cr: Manifest) -> Manifest:
    """Ray's own derivation (the oracle)."""
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _derive_autoscaling_config_from_ray_cr,
    )

    logging.getLogger("ray.autoscaler").setLevel(logging.CRITICAL)  # its warnings are expected
    result: Manifest = _derive_autoscaling_config_from_ray_cr(copy.deepcopy(cr))
    return result


@functools.cache
def _crd_schema() -> Manifest:
    doc = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    version = next(v for v in doc["spec"]["versions"] if v["name"] == "v1")
    schema: Manifest = version["schema"]["openAPIV3Schema"]
    return schema


def _default(value: Any, schema: Manifest) -> Any:
    """The API server's structural defaulting: absent properties with a default get it."""
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = _default(value[key], sub)
    elif isinstance(value, list) and "items" in schema:
        return [_default(item, schema["items"]) for item in value]
    return value


def stored_raycluster(name: str, namespace: str, spec: Manifest) -> Manifest:
    """The RayCluster as the API server stores it: metadata set, CRD defaults applied.

    One difference: a head-only cluster gets `workerGroupSpecs: []`. Ray's derivation reads
    the key unconditionally (KeyError: its autoscaler crash-loops on such a cluster under
    KubeRay); the port renders the head-only config that Ray gives for an empty list.
    """
    spec = {"workerGroupSpecs": [], **spec}
    cr = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": copy.deepcopy(spec),
    }
    return _default(cr, _crd_schema())  # type: ignore[no-any-return]


def without_provider(config: Manifest) -> Manifest:
    return {key: value for key, value in config.items() if key != "provider"}


def _documents(path: Path) -> list[Any]:
    documents, problems = sources.read_documents([str(path)])
    assert not problems
    return documents


def _cluster_spec(doc: Manifest) -> Manifest | None:
    path = KINDS.get(str(doc.get("kind")))
    if path is None:
        return None
    found: Any = doc
    for key in path:
        found = (found or {}).get(key)
    return found if isinstance(found, dict) else None


def _rendered_configs(objects: tuple[Manifest, ...]) -> dict[str, tuple[Manifest, Manifest]]:
    """cluster name -> (parsed autoscaling.yaml, the ConfigMap)."""
    found = {}
    for obj in objects:
        if obj["kind"] == "ConfigMap" and autoscaling.CONFIG_KEY in obj.get("data", {}):
            text = obj["data"][autoscaling.CONFIG_KEY]
            parsed = yaml.safe_load(text)
            assert parsed == json.loads(text)  # JSON text: any YAML reader reads the same
            found[obj["metadata"]["labels"]["ray.io/cluster"]] = (parsed, obj)
    return found


def check_sample_parity(path: Path, switch_on: bool) -> int:
    """Render the sample; each cluster's config equals Ray's. Returns the clusters compared."""
    documents = _documents(path)
    specs: list[Manifest] = []
    for document in documents:
        spec = _cluster_spec(document.data) if isinstance(document.data, dict) else None
        if spec is None:
            continue
        if switch_on:
            spec["enableInTreeAutoscaling"] = True
        if spec.get("enableInTreeAutoscaling") is True:
            auth = spec.get("authOptions")
            if isinstance(auth, dict) and auth.get("mode") == "token":
                auth.setdefault("secretName", "ray-token")  # a random token cannot be rendered
            specs.append(spec)
    result = compiler.render(documents, OPTIONS)
    configs = _rendered_configs(result.objects)
    assert len(configs) == len(specs)
    # One cluster per document here: match them up through the rendered cluster's spec.
    for spec, (name, (config, configmap)) in zip(specs, sorted(configs.items()), strict=True):
        namespace = configmap["metadata"]["namespace"]
        expected = ray_derive(stored_raycluster(name, namespace, spec))
        assert without_provider(config) == without_provider(expected)
        assert config["provider"] == autoscalingconfig.provider_config(name, namespace)
    return len(configs)


@pytest.mark.parametrize("name", AUTOSCALING_SAMPLES)
def test_each_autoscaling_sample_renders_rays_own_config(name: str) -> None:
    assert check_sample_parity(SAMPLES / name, switch_on=True) == 1


def _all_samples() -> list[Path]:
    found = []
    for path in sorted(SAMPLES.rglob("*.yaml")):
        documents, problems = sources.read_documents([str(path)])
        if not problems and any(
            isinstance(d.data, dict) and d.data.get("kind") in KINDS for d in documents
        ):
            found.append(path)
    return found


ALL_SAMPLES = _all_samples()
# Refusals that have nothing to do with autoscaling (or are autoscaling's own limits).
_OTHER_REFUSALS = (
    "generateName is not supported",
    "numOfHosts",
    "clusterSelector",
    "RayCronJob",
    "SidecarMode",
    "not supported with autoscaling enabled",  # KubeRay's RayJob DeleteWorkers rule
)


@pytest.mark.parametrize("path", ALL_SAMPLES, ids=[p.name for p in ALL_SAMPLES])
def test_every_sample_with_autoscaling_on_matches_ray_or_is_refused_as_ray_fails(
    path: Path,
) -> None:
    try:
        compared = check_sample_parity(path, switch_on=True)
    except ManifestError as error:
        messages = [d.problem.message for d in error.diagnostics if d.problem.severity == "error"]
        ray_reads = [m for m in messages if m.startswith("Ray's autoscaler cannot")]
        if not ray_reads:
            assert any(any(r in m for r in _OTHER_REFUSALS) for m in messages), messages
            return
        # The renderer refused what Ray cannot read: Ray's derivation must fail on it too.
        for document in _documents(path):
            spec = _cluster_spec(document.data) if isinstance(document.data, dict) else None
            if spec is not None:
                with pytest.raises((ValueError, KeyError, AssertionError)):
                    ray_derive(stored_raycluster("c", "default", spec))
        return
    assert compared >= 1


# --- fuzzed cluster specs --------------------------------------------------------------------

_CPU = st.sampled_from(["0", "1", "2", "500m", "1500m", "0.5", "2.5", "16", "100m", "1e3"])
_MEMORY = st.sampled_from(["1Gi", "512Mi", "2G", "500M", "1073741824", "1.5Gi", "1e9", "100Ki"])
_COUNT = st.sampled_from(["0", "1", "2", "4", "8"])
_NAME = st.text(string.ascii_lowercase, min_size=1, max_size=8)
_LABEL_VALUE = st.text(string.ascii_letters + string.digits, min_size=1, max_size=6)


@st.composite
def _container_resources(draw: st.DrawFn) -> Manifest:
    resources: Manifest = {}
    for kind in ("limits", "requests"):
        if draw(st.booleans()):
            entry: Manifest = {}
            if draw(st.booleans()):
                entry["cpu"] = draw(_CPU)
            if draw(st.booleans()):
                entry["memory"] = draw(_MEMORY)
            gpu = draw(st.sampled_from([None, "nvidia.com/gpu", "amd.com/gpu"]))
            if gpu is not None:
                entry[gpu] = draw(_COUNT)
            if draw(st.integers(0, 5)) == 0:
                entry["google.com/tpu"] = draw(_COUNT)
            resources[kind] = entry
    return resources


@st.composite
def _group(draw: st.DrawFn, name: str | None) -> Manifest:
    group: Manifest = {}
    params: Manifest = {}
    if draw(st.booleans()):
        params["num-cpus"] = draw(_COUNT)
    if draw(st.integers(0, 3)) == 0:
        params["num-gpus"] = draw(_COUNT)
    if draw(st.integers(0, 3)) == 0:
        params["memory"] = draw(st.sampled_from(["1000000", "2147483648"]))
    if draw(st.integers(0, 3)) == 0:
        custom = draw(st.dictionaries(_NAME, st.integers(0, 9), max_size=2))
        params["resources"] = '"' + json.dumps(custom).replace('"', '\\"') + '"'
    keep_params = draw(st.booleans())
    if params or keep_params:
        group["rayStartParams"] = params
    if draw(st.integers(0, 3)) == 0:
        group["resources"] = draw(
            st.dictionaries(
                st.sampled_from(["CPU", "GPU", "TPU", "memory", "custom", "cpu"]),
                st.one_of(_CPU, _COUNT),
                max_size=3,
            )
        )
    if draw(st.booleans()):
        group["labels"] = draw(
            st.dictionaries(st.sampled_from(["a", "ray.io/zone", "x.io/k"]), _LABEL_VALUE)
        )
    pod: Manifest = {"containers": [{"name": "ray", "image": "rayproject/ray:2.52.0"}]}
    resources = draw(_container_resources())
    if resources:
        pod["containers"][0]["resources"] = resources
    if draw(st.integers(0, 4)) == 0:
        pod["nodeSelector"] = {
            "cloud.google.com/gke-tpu-topology": draw(st.sampled_from(["2x2", "2x2x1", "4x4"])),
            "cloud.google.com/gke-tpu-accelerator": draw(
                st.sampled_from(["tpu-v4-podslice", "tpu-v6e-slice", "tpu-v5p-slice", "other"])
            ),
        }
    group["template"] = {"spec": pod}
    if name is not None:
        group["groupName"] = name
        low = draw(st.integers(0, 5))
        for key, value in (
            ("minReplicas", low),
            ("maxReplicas", draw(st.integers(low, 20))),
            ("replicas", draw(st.integers(0, 20))),
            ("idleTimeoutSeconds", draw(st.integers(0, 600))),
            ("priority", draw(st.integers(0, 10))),
        ):
            if draw(st.booleans()):
                group[key] = value
    return group


@st.composite
def cluster_specs(draw: st.DrawFn) -> Manifest:
    names = draw(st.lists(_NAME, unique=True, max_size=3))
    spec: Manifest = {
        "enableInTreeAutoscaling": True,
        "headGroupSpec": draw(_group(None)),
        "workerGroupSpecs": [draw(_group(name)) for name in names],
    }
    options: Manifest = {}
    if draw(st.booleans()):
        options["idleTimeoutSeconds"] = draw(st.integers(0, 3600))
    mode = draw(st.sampled_from([None, "Default", "Aggressive", "Conservative"]))
    if mode is not None:
        options["upscalingMode"] = mode
    keep_options = draw(st.booleans())
    if options or keep_options:
        spec["autoscalerOptions"] = options
    return spec


FUZZ_CASES = 400


@settings(
    max_examples=FUZZ_CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(cluster_specs())
def test_fuzzed_specs_derive_rays_own_config(spec: Manifest) -> None:
    cr = stored_raycluster("fuzz", "ns", spec)
    ours, problems = autoscalingconfig.derive("fuzz", "ns", cr["spec"], ("spec",))
    try:
        expected = ray_derive(cr)
    except (ValueError, AssertionError, KeyError):
        assert ours is None and problems, "Ray's derivation failed but the port did not"
        return
    assert ours is not None, [p.message for p in problems]
    rendered = yaml.safe_load(autoscalingconfig.config_text(ours))
    assert without_provider(rendered) == without_provider(expected)
    # With the provider swapped for ours, Ray's own validator still accepts the config.
    from ray.autoscaler._private.util import validate_config

    validate_config(rendered)


def test_the_port_reads_the_spec_without_crd_defaults_as_the_api_server_would_store_it() -> None:
    spec: Manifest = {
        "headGroupSpec": {"template": {"spec": {"containers": [{"resources": {}}]}}},
        "workerGroupSpecs": [
            {
                "groupName": "g",
                "rayStartParams": {"num-cpus": "2"},
                "template": {"spec": {"containers": [{}]}},
            }
        ],
    }
    spec["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    ours, problems = autoscalingconfig.derive("c", "ns", spec, ("spec",))
    assert not problems and ours is not None
    expected = ray_derive(stored_raycluster("c", "ns", spec))
    assert without_provider(ours) == without_provider(expected)
    assert ours["available_node_types"]["g"]["max_workers"] == 2147483647
    assert ours["available_node_types"]["g"]["priority"] == 0


def test_quantities_parse_as_rays_do() -> None:
    assert autoscalingconfig.round_up("1500m") == 2
    assert autoscalingconfig.round_up("1Gi") == 1073741824
    assert autoscalingconfig.round_up(3) == 3
    assert autoscalingconfig.round_up(0.25) == 1
    for bad in ("1ki", "x", True, None, "Infinity"):
        with pytest.raises(ValueError, match=r"quantity|number|suffix|Infinity"):
            autoscalingconfig.round_up(bad)


def test_groups_json_holds_the_crd_defaults() -> None:
    spec = {"workerGroupSpecs": [{"groupName": "a"}, {"groupName": "b", "minReplicas": 1}]}
    assert json.loads(autoscalingconfig.groups_json(spec)) == {
        "a": {"min": 0, "max": 2147483647, "replicas": 0},
        "b": {"min": 1, "max": 2147483647, "replicas": 0},
    }


def _tpu_group(topology: str, accelerator: str) -> Manifest:
    return {
        "groupName": "tpu",
        "rayStartParams": {"num-cpus": "1"},
        "template": {
            "spec": {
                "containers": [{"resources": {"limits": {"google.com/tpu": "4"}}}],
                "nodeSelector": {
                    "cloud.google.com/gke-tpu-topology": topology,
                    "cloud.google.com/gke-tpu-accelerator": accelerator,
                },
            }
        },
    }


@pytest.mark.parametrize(
    ("topology", "accelerator"),
    [("2x2", "tpu-v4-podslice"), ("", "tpu-v4-podslice"), ("2x2", "other"), ("2x2", "")],
)
def test_tpu_head_resources_follow_ray(topology: str, accelerator: str) -> None:
    spec: Manifest = {
        "headGroupSpec": {
            "rayStartParams": {"num-cpus": "0"},
            "template": {"spec": {"containers": [{}]}},
        },
        "workerGroupSpecs": [_tpu_group(topology, accelerator)],
    }
    cr = stored_raycluster("c", "ns", spec)
    ours, problems = autoscalingconfig.derive("c", "ns", cr["spec"], ("spec",))
    assert not problems and ours is not None
    assert without_provider(ours) == without_provider(ray_derive(cr))


def test_a_tpu_topology_ray_cannot_read_is_refused() -> None:
    spec: Manifest = {
        "headGroupSpec": {
            "rayStartParams": {"num-cpus": "0"},
            "template": {"spec": {"containers": [{}]}},
        },
        "workerGroupSpecs": [_tpu_group("2xq", "tpu-v4-podslice")],
    }
    cr = stored_raycluster("c", "ns", spec)
    with pytest.raises(ValueError, match="invalid literal"):
        ray_derive(cr)
    ours, problems = autoscalingconfig.derive("c", "ns", cr["spec"], ("spec",))
    assert ours is None
    assert [p.message for p in problems] == ['Ray\'s autoscaler cannot read the TPU topology "2xq"']
