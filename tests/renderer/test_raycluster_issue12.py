"""Issue 12, renderer half: numOfHosts 0, clusterSelector in one run, Redis default namespace."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from renderer import compile as compiler
from renderer import naming
from renderer.errors import ManifestError, Origin
from renderer.manifest import Manifest
from renderer.model.document import Document
from renderer.rules.limits import group_pods


def _docs(*data: Manifest) -> list[Document]:
    return [Document(d, Origin("in.yaml", index)) for index, d in enumerate(data, start=1)]


def _container(name: str, image: str) -> Manifest:
    return {"name": name, "image": image, "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}


def _cluster(name: str = "ft", namespace: str = "team", **spec: Any) -> Manifest:
    body: Manifest = {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [_container("ray-head", "rayproject/ray:2.52.0")]}},
        }
    }
    body.update(spec)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def _head(objects: tuple[Manifest, ...]) -> Manifest:
    (head,) = [
        o
        for o in objects
        if o["kind"] == "Pod" and o["metadata"]["labels"].get("ray.io/node-type") == "head"
    ]
    return head


def _storage_namespace(head: Manifest) -> tuple[str, str]:
    env = {e["name"]: e.get("value") for e in head["spec"]["containers"][0].get("env") or []}
    return head["metadata"]["annotations"][naming.ANN_STORAGE_NS], env[
        "RAY_external_storage_namespace"
    ]


# --- numOfHosts: 0 (raycluster.md §1.6: replicas x numOfHosts) -----------------------------


def test_zero_hosts_is_zero_pods_and_absent_hosts_is_one() -> None:
    assert group_pods({"replicas": 3, "numOfHosts": 0}) == (3, 0, 0)
    assert group_pods({"replicas": 3}) == (3, 1, 3)
    assert group_pods({"replicas": 3, "numOfHosts": 2}) == (3, 2, 6)


def test_zero_hosts_group_renders_no_worker_pod() -> None:
    worker = {
        "groupName": "parked",
        "replicas": 2,
        "numOfHosts": 0,
        "template": {"spec": {"containers": [_container("ray-worker", "rayproject/ray:2.52.0")]}},
    }
    result = compiler.render(_docs(_cluster(workerGroupSpecs=[worker])))
    pods = [o for o in result.objects if o["kind"] == "Pod"]
    assert [p["metadata"]["labels"]["ray.io/node-type"] for p in pods] == ["head"]
    # numOfHosts 0 is not > 1: no headless worker Service either.
    assert not [o for o in result.objects if o["metadata"]["name"] == "ft-headless"]


# --- Redis GCS FT without externalStorageNamespace (README: `<namespace>/<name>`) ----------

REDIS = {"redisAddress": "redis:6379"}


def test_redis_default_namespace_is_namespace_slash_name() -> None:
    result = compiler.render(_docs(_cluster(gcsFaultToleranceOptions=REDIS)))
    assert _storage_namespace(_head(result.objects)) == ("team/ft", "team/ft")


def test_redis_default_namespace_does_not_follow_the_pod_template() -> None:
    changed = _cluster(gcsFaultToleranceOptions=REDIS)
    changed["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = "other:1"
    changed["spec"]["headGroupSpec"]["rayStartParams"] = {"num-cpus": "0"}
    first = _head(compiler.render(_docs(_cluster(gcsFaultToleranceOptions=REDIS))).objects)
    second = _head(compiler.render(_docs(changed)).objects)
    assert first["metadata"]["name"] != second["metadata"]["name"]  # the template hash moved
    assert _storage_namespace(first) == _storage_namespace(second) == ("team/ft", "team/ft")


def test_redis_default_namespace_in_legacy_annotation_mode() -> None:
    legacy = _cluster()
    legacy["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    head = _head(compiler.render(_docs(legacy)).objects)
    assert _storage_namespace(head) == ("team/ft", "team/ft")


def test_an_explicit_storage_namespace_still_wins() -> None:
    options = {**REDIS, "externalStorageNamespace": "mine"}
    head = _head(compiler.render(_docs(_cluster(gcsFaultToleranceOptions=options))).objects)
    assert _storage_namespace(head) == ("mine", "mine")
    legacy = _cluster()
    legacy["metadata"]["annotations"] = {
        "ray.io/ft-enabled": "true",
        "ray.io/external-storage-namespace": "theirs",
    }
    assert _storage_namespace(_head(compiler.render(_docs(legacy)).objects)) == (
        "theirs",
        "theirs",
    )


# --- K8sJobMode + clusterSelector with the cluster in the same run (rayjob.md §3.1.2) ------


def _selector_job(cluster: str = "ft", namespace: str = "team") -> Manifest:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "job", "namespace": namespace},
        "spec": {"clusterSelector": {"ray.io/cluster": cluster}, "entrypoint": "python x.py"},
    }


def _submitter_image(objects: tuple[Manifest, ...]) -> str:
    (job,) = [o for o in objects if o["kind"] == "Job"]
    image: str = job["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def test_submitter_image_is_the_first_head_container_of_the_selected_cluster() -> None:
    cluster = _cluster()
    containers = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    containers[0]["image"] = "rayproject/ray:2.52.0-py311"
    containers.append(_container("sidecar", "busybox:1"))
    # Document order does not matter: the job may come before its cluster.
    result = compiler.render(_docs(_selector_job(), cluster))
    assert _submitter_image(result.objects) == "rayproject/ray:2.52.0-py311"


@pytest.mark.parametrize(
    ("cluster_name", "cluster_namespace"), [("other", "team"), ("ft", "elsewhere")]
)
def test_a_cluster_of_another_name_or_namespace_is_not_the_selected_one(
    cluster_name: str, cluster_namespace: str
) -> None:
    documents = _docs(_selector_job(), _cluster(cluster_name, cluster_namespace))
    with pytest.raises(ManifestError) as caught:
        compiler.render(documents)
    messages = [d.problem.message for d in caught.value.diagnostics]
    assert any("which kuberay render cannot read" in m for m in messages), messages


def test_a_user_submitter_template_is_kept_when_the_cluster_is_in_the_run() -> None:
    job = _selector_job()
    job["spec"]["submitterPodTemplate"] = {
        "spec": {"restartPolicy": "Never", "containers": [_container("s", "mine:1")]}
    }
    result = compiler.render(_docs(copy.deepcopy(job), _cluster()))
    assert _submitter_image(result.objects) == "mine:1"
