"""`kuberay-krm`, the KRM function, run by the real kustomize and on hand-made ResourceLists."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from renderer import compile as compiler
from renderer import sources
from renderer.options import RenderOptions
from tests.integrations.tools import VENV_BIN, build, krmcheck, tool_env
from tests.paths import EXAMPLES, INVALID

Manifest = dict[str, Any]

# The README's "Use it with kustomize" snippet: a transformer config that runs the function.
TRANSFORMER = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: kuberay-render
  annotations:
    config.kubernetes.io/function: |
      exec:
        path: kuberay-krm
data:
  clusterDomain: cluster.local
"""

PLAIN = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}, "data": {"a": "1"}}


def canonical(objects: list[Manifest]) -> list[str]:
    return sorted(json.dumps(o, sort_keys=True) for o in objects)


def rendered(paths: list[Path], options: RenderOptions | None = None) -> list[Manifest]:
    documents, problems = sources.read_documents([str(p) for p in paths])
    assert not problems
    return list(compiler.render(documents, options or RenderOptions()).objects)


def kustomization(tmp_path: Path, *sources_: Path, extra: str = "") -> Path:
    for source in sources_:
        (tmp_path / source.name).write_text(source.read_text())
    (tmp_path / "plain.yaml").write_text(yaml.safe_dump(PLAIN))
    (tmp_path / "kuberay.yaml").write_text(TRANSFORMER)
    names = ", ".join([*(s.name for s in sources_), "plain.yaml"])
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{names}]\ntransformers: [kuberay.yaml]\n{extra}"
    )
    return tmp_path


def krm(resource_list: Any) -> tuple[int, Manifest | None, str]:
    done = subprocess.run(
        [str(VENV_BIN / "kuberay-krm")],
        input=yaml.safe_dump(resource_list),
        capture_output=True,
        text=True,
        env=tool_env(),
        check=False,
    )
    out = yaml.safe_load(done.stdout) if done.stdout else None
    return done.returncode, out, done.stderr


def test_kustomize_renders_ray_items_like_kuberay_render(tmp_path: Path) -> None:
    examples = [
        EXAMPLES / "raycluster.yaml",
        EXAMPLES / "rayjob.yaml",
        EXAMPLES / "rayservice.yaml",
    ]
    built = build(kustomization(tmp_path, *examples), exec_functions=True)
    assert built.returncode == 0, built.stderr
    output = list(yaml.safe_load_all(built.stdout))
    assert not [o for o in output if str(o["apiVersion"]).startswith("ray.io/")]
    assert canonical(output) == canonical([*rendered(examples), PLAIN])


def test_kustomize_reports_the_file_and_json_path_of_a_problem(tmp_path: Path) -> None:
    bad = INVALID / "serve-port.yaml"
    directory = kustomization(tmp_path, bad, extra="buildMetadata: [originAnnotations]\n")
    built = build(directory, exec_functions=True)
    assert built.returncode != 0
    assert (
        'serve-port.yaml: error: metadata.annotations["ray.io/enable-serve-service"]: '
        in built.stderr
    )


def test_results_name_item_file_and_field_and_the_exit_is_non_zero() -> None:
    item = yaml.safe_load((INVALID / "serve-port.yaml").read_text())
    item["metadata"].setdefault("annotations", {}).update(
        {"internal.config.kubernetes.io/path": "apps/serve.yaml", "config.kubernetes.io/index": "0"}
    )
    code, out, _ = krm(
        {"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": [PLAIN, item]}
    )
    assert code == 1 and out is not None
    assert out["items"] == [PLAIN, item]  # unchanged on error
    (result,) = out["results"]
    assert result["severity"] == "error"
    assert result["file"] == {"path": "apps/serve.yaml", "index": 0}
    assert result["field"] == {"path": 'metadata.annotations["ray.io/enable-serve-service"]'}
    assert result["resourceRef"] == {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "name": "serving",
    }


def sdk_reading(output: Manifest) -> Manifest:
    """What the kpt function SDK's ResourceList parser (fn.ParseResourceList) reads."""
    done = subprocess.run(
        [krmcheck()], input=yaml.safe_dump(output), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    read: Manifest = json.loads(done.stdout)
    return read


def test_the_kpt_sdk_reads_our_output_items_and_results() -> None:
    job = yaml.safe_load((EXAMPLES / "rayjob.yaml").read_text())
    code, out, err = krm(
        {"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": [PLAIN, job]}
    )
    assert code == 0 and out is not None, err
    read = sdk_reading(out)
    assert read["items"] == [
        {
            "apiVersion": o["apiVersion"],
            "kind": o["kind"],
            "name": o["metadata"]["name"],
            **({"namespace": o["metadata"]["namespace"]} if "namespace" in o["metadata"] else {}),
        }
        for o in out["items"]
    ]
    assert len(read["items"]) > 5 and read["results"] == []
    item = yaml.safe_load((INVALID / "serve-port.yaml").read_text())
    item["metadata"].setdefault("annotations", {}).update(
        {"internal.config.kubernetes.io/path": "apps/serve.yaml", "config.kubernetes.io/index": "0"}
    )
    code, out, _ = krm(
        {"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": [item]}
    )
    assert code == 1 and out is not None
    (result,) = sdk_reading(out)["results"]
    (ours,) = out["results"]
    assert result == {
        "severity": "error",
        "message": ours["message"],
        "resourceRef": {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "serving"},
        "field": ours["field"]["path"],
        "file": "apps/serve.yaml",
    }
    broken = subprocess.run([krmcheck()], input="kind: [", capture_output=True, text=True)
    assert broken.returncode == 1 and "not a ResourceList" in broken.stderr


def test_function_config_sets_the_render_options() -> None:
    item = yaml.safe_load((EXAMPLES / "raycluster.yaml").read_text())
    del item["metadata"]["namespace"]
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c"},
        "data": {"namespace": "team-b", "featureGates": "RayClusterNetworkPolicy=true"},
    }
    code, out, err = krm(
        {
            "apiVersion": "config.kubernetes.io/v1",
            "kind": "ResourceList",
            "items": [item],
            "functionConfig": config,
        }
    )
    assert code == 0, err
    assert out is not None
    options = RenderOptions(namespace="team-b").with_gates(RayClusterNetworkPolicy=True)
    expected = compiler.render(sources.parse_text(yaml.safe_dump(item), "x")[0], options).objects
    assert canonical(out["items"]) == canonical(list(expected))
    assert {o["metadata"].get("namespace") for o in out["items"]} == {"team-b"}
    default = compiler.render(sources.parse_text(yaml.safe_dump(item), "x")[0]).objects
    assert canonical(list(default)) != canonical(out["items"])


def test_bad_input_and_bad_config_are_clear_errors() -> None:
    code, out, err = krm({"kind": "Pod"})
    assert (code, out) == (1, None)
    assert "expected a config.kubernetes.io/v1 ResourceList" in err
    config = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"nameSpace": "x"}}
    code, out, err = krm(
        {
            "apiVersion": "config.kubernetes.io/v1",
            "kind": "ResourceList",
            "items": [],
            "functionConfig": config,
        }
    )
    assert code == 1 and "unknown key(s) nameSpace" in err
    config["data"] = {"probesInjection": "maybe"}
    code, out, err = krm(
        {
            "apiVersion": "config.kubernetes.io/v1",
            "kind": "ResourceList",
            "items": [],
            "functionConfig": config,
        }
    )
    assert code == 1 and "probesInjection: expected true or false" in err
