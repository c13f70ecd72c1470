"""The `--output-dir` plan (DESIGN §4): one file per object, a kustomization, a marker."""

from __future__ import annotations

from typing import Any

import yaml

from renderer import emit, output

Manifest = dict[str, Any]


def obj(kind: str, name: str, namespace: str | None = "ns", api: str = "v1") -> Manifest:
    meta: Manifest = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": api, "kind": kind, "metadata": meta}


def test_file_names_are_lower_case_and_safe() -> None:
    assert output.file_name(obj("Service", "c-head-svc")) == "service_ns_c-head-svc.yaml"
    # A cluster-scoped object has no namespace part; unsafe characters become `-`.
    assert output.file_name(obj("ClusterRole", "a:b/c", None)) == "clusterrole__a-b-c.yaml"


def test_objects_that_fold_to_one_file_name_get_numbered_files() -> None:
    # Two objects may differ only in what the file name drops (API group, case, punctuation);
    # each still gets its own file, and a name that is taken already is skipped.
    objects = [
        obj("Ingress", "web", api="networking.k8s.io/v1"),
        obj("Ingress", "web-2", api="networking.k8s.io/v1"),
        obj("Ingress", "web", api="extensions/v1beta1"),
        obj("Ingress", "WEB", api="example.com/v1"),
    ]
    files = output.plan_directory(objects)
    names = [n for n in files if n.endswith(".yaml") and n != output.KUSTOMIZATION]
    assert names == [
        "ingress_ns_web.yaml",
        "ingress_ns_web-2.yaml",
        "ingress_ns_web-3.yaml",
        "ingress_ns_web-4.yaml",
    ]
    assert [yaml.safe_load(files[n])["apiVersion"] for n in names] == [
        "networking.k8s.io/v1",
        "networking.k8s.io/v1",
        "extensions/v1beta1",
        "example.com/v1",
    ]
    kustomization = yaml.safe_load(files[output.KUSTOMIZATION])
    assert kustomization["resources"] == names


def test_marker_lists_every_other_file_it_writes() -> None:
    files = output.plan_directory([obj("Pod", "p")])
    assert files[output.MARKER].startswith(output.MARKER_HEADER)
    assert output.read_marker(files[output.MARKER]) == [output.KUSTOMIZATION, "pod_ns_p.yaml"]
    assert files["pod_ns_p.yaml"] == emit.dump(obj("Pod", "p"))
