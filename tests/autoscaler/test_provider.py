"""The autoscaler's node provider against the fake API server (plain HTTP through the override).

The provider is the file the renderer ships into the head Pod, imported as Ray's
autoscaler imports it; the desired set is a real ConfigMap on the fake server, and the
Pods are moved through their phases by the fake kubelet.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from renderer.assets.autoscaler import kuberay_gitops_autoscaler as provider_module
from renderer.assets.autoscaler.kuberay_gitops_autoscaler import KubeApiError, PodProvider
from syncer.autoscaler import plan
from syncer.kube.client import CONFIGMAPS, PODS, KubeClient
from tests.autoscaler import rig
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi

Manifest = dict[str, Any]
WORKER_TAGS = {"ray-user-node-type": rig.GROUP, "ray-launch-request": "req-1"}


@pytest.fixture
def kube(kube_api: KubeApi) -> Iterator[KubeClient]:
    client = KubeClient(kube_api.api_client)
    yield client
    client.close()


@pytest.fixture
def provider(kube_api: KubeApi, monkeypatch: pytest.MonkeyPatch) -> PodProvider:
    monkeypatch.setenv(provider_module.API_URL_ENV, kube_api.fake.url)
    monkeypatch.setattr(provider_module, "RETRY_BASE_S", 0.01)
    config = {
        "type": "external",
        "module": "kuberay_gitops_autoscaler.PodProvider",
        "namespace": kube_api.namespace,
        "cluster": rig.CLUSTER,
        "state_configmap": f"{rig.CLUSTER}-autoscaler-state",
    }
    return PodProvider(config, rig.CLUSTER)


def _state(kube: KubeClient, namespace: str, data: dict[str, str] | None = None) -> None:
    kube.create(
        CONFIGMAPS,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{rig.CLUSTER}-autoscaler-state", "namespace": namespace},
            "data": data or {},
        },
    )


def _head(kube: KubeClient, namespace: str, controllers: Controllers) -> str:
    head, _ = rig.rendered(namespace)
    kube.create(PODS, namespace, head)
    controllers.settle()
    return str(head["metadata"]["name"])


def test_the_head_is_listed_as_kind_head_of_type_headgroup(
    kube_api: KubeApi, kube: KubeClient, provider: PodProvider, fake_controllers: Controllers
) -> None:
    head = _head(kube, kube_api.namespace, fake_controllers)
    assert provider.non_terminated_nodes({}) == [head]
    tags = provider.node_tags(head)
    assert tags["ray-node-type"] == "head"
    assert tags["ray-user-node-type"] == "headgroup"
    assert provider.is_running(head)
    assert provider.internal_ip(head) == "127.0.0.1"
    assert provider.non_terminated_nodes({"ray-node-type": "worker"}) == []


def test_create_node_without_the_state_map_fails_and_writes_nothing(
    kube_api: KubeApi, provider: PodProvider
) -> None:
    with pytest.raises(KubeApiError) as caught:
        provider.create_node({}, WORKER_TAGS, 1)
    assert caught.value.status == 404
    assert kube_api.fake.audit.writes(resource="pods") == []


def test_fifty_concurrent_create_node_calls_add_every_name_once(
    kube_api: KubeApi, kube: KubeClient, provider: PodProvider
) -> None:
    ns = kube_api.namespace
    _state(kube, ns)
    mark = kube_api.fake.audit.mark()
    barrier = threading.Barrier(50)
    made: list[str] = []
    lock = threading.Lock()

    def launch(count: int) -> None:
        barrier.wait()
        names = provider.create_node({}, WORKER_TAGS, count) or {}
        with lock:
            made.extend(names)

    threads = [threading.Thread(target=launch, args=(1 + i % 2,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    data = rig.state_data(kube, ns)
    assert len(made) == 75 == len(set(made))
    assert set(data) == set(made)
    assert all(plan.is_dynamic_name(name, rig.CLUSTER, rig.GROUP) for name in made)
    assert all(v == {"group": rig.GROUP, "request": "req-1"} for v in data.values())
    # One merge patch per call, no read-modify-write, and never a Pod write.
    patches = kube_api.fake.audit.records(verb="patch", resource="configmaps", since=mark)
    assert len(patches) == 50
    assert {r.content_type for r in patches} == {"application/merge-patch+json"}
    reads = kube_api.fake.audit.records(verb="get", resource="configmaps", since=mark)
    assert [r for r in reads if r.user_agent == provider_module.USER_AGENT] == []
    assert {r.user_agent for r in patches} == {provider_module.USER_AGENT}
    assert kube_api.fake.audit.writes(resource="pods") == []
    # The new names are pending nodes at once.
    assert set(provider.non_terminated_nodes({"ray-node-type": "worker"})) == set(made)
    assert not any(provider.is_running(name) for name in made)


def test_terminate_nodes_removes_the_names_and_keeps_the_others(
    kube_api: KubeApi, kube: KubeClient, provider: PodProvider
) -> None:
    ns = kube_api.namespace
    _state(kube, ns)
    names = list(provider.create_node({}, WORKER_TAGS, 3) or {})
    provider.terminate_nodes(names[:2])
    assert set(rig.state_data(kube, ns)) == {names[2]}
    assert provider.non_terminated_nodes({}) == [names[2]]
    tags = provider.node_tags(names[2])
    assert tags["ray-node-type"] == "worker"
    assert tags["ray-user-node-type"] == rig.GROUP
    assert tags["ray-launch-request"] == "req-1"


def test_terminating_names_no_longer_desired_writes_nothing(
    kube_api: KubeApi, kube: KubeClient, provider: PodProvider
) -> None:
    # A restarted autoscaler terminates the dead Ray nodes of Pods deleted before it ran.
    ns = kube_api.namespace
    _state(kube, ns, {"demo-small-worker-kept1": json.dumps({"group": rig.GROUP})})
    assert provider.non_terminated_nodes({}) == ["demo-small-worker-kept1"]
    mark = kube_api.fake.audit.mark()
    provider.terminate_nodes(["demo-small-worker-gone1", "demo-small-worker-gone2"])
    assert kube_api.fake.audit.writes(since=mark) == []
    provider.terminate_nodes(["demo-small-worker-gone1", "demo-small-worker-kept1"])
    assert [r.name for r in kube_api.fake.audit.writes(since=mark)] == [
        f"{rig.CLUSTER}-autoscaler-state"
    ]
    assert rig.state_data(kube, ns) == {}


def test_a_dead_worker_is_reported_terminated_and_its_name_removed(
    kube_api: KubeApi, kube: KubeClient, provider: PodProvider, fake_controllers: Controllers
) -> None:
    ns = kube_api.namespace
    head = _head(kube, ns, fake_controllers)
    _state(kube, ns)
    alive, dead, ended = list(provider.create_node({}, WORKER_TAGS, 3) or {})
    _, worker = rig.rendered(ns)
    template = rig.worker_template(worker, tracking=False)
    for name in (alive, dead, ended):
        pod = json.loads(json.dumps(template))
        pod["metadata"]["name"] = name
        kube.create(PODS, ns, pod)
    fake_controllers.settle()
    assert set(provider.non_terminated_nodes({})) == {head, alive, dead, ended}
    assert all(provider.is_running(n) for n in (alive, dead, ended))
    fake_controllers.kubelet.set_phase(ns, dead, "Failed", exit_code=1)
    # The Ray container ended while the Pod still reads Running (restartPolicy Never).
    pod = kube.get(PODS, ns, ended)
    assert pod is not None
    status = pod["status"]
    status["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 137}}
    kube_api.fake.put_object({**pod, "status": status})
    assert set(provider.non_terminated_nodes({})) == {head, alive}
    assert set(rig.state_data(kube, ns)) == {alive}
    assert provider.is_terminated(dead)
    assert provider.is_terminated(ended)


def test_transient_faults_are_retried_and_a_conflict_is_not(
    kube_api: KubeApi, kube: KubeClient, provider: PodProvider
) -> None:
    ns, faults = kube_api.namespace, kube_api.fake.faults
    _state(kube, ns)
    faults.fail(503, verb="patch", resource="configmaps", times=2)
    names = list(provider.create_node({}, WORKER_TAGS, 2) or {})
    assert set(rig.state_data(kube, ns)) == set(names)
    faults.fail(409, verb="patch", resource="configmaps", times=1)
    with pytest.raises(KubeApiError) as caught:
        provider.create_node({}, WORKER_TAGS, 1)
    assert caught.value.status == 409
    assert set(rig.state_data(kube, ns)) == set(names)
    faults.fail(503, verb="get", resource="configmaps", times=None)
    with pytest.raises(KubeApiError) as listing:
        provider.non_terminated_nodes({})
    assert listing.value.status == 503
    faults.clear_rules()
    assert set(provider.non_terminated_nodes({})) == set(names)


def test_the_provider_refuses_the_head_type_and_absurd_counts(
    kube_api: KubeApi, kube: KubeClient, provider: PodProvider
) -> None:
    _state(kube, kube_api.namespace)
    with pytest.raises(ValueError, match="headgroup"):
        provider.create_node({}, {"ray-user-node-type": "headgroup"}, 1)
    with pytest.raises(ValueError, match="count"):
        provider.create_node({}, WORKER_TAGS, 10**6)
    assert rig.state_data(kube, kube_api.namespace) == {}


def test_worker_names_fit_63_characters_and_never_match_a_rendered_name() -> None:
    import random

    rng = random.Random(7)
    long_cluster = "c" * 40
    name = provider_module.worker_name(long_cluster, "g" * 30, rng)
    assert len(name) <= 63
    assert plan.is_dynamic_name(name, long_cluster, "g" * 30)
    short = provider_module.worker_name(rig.CLUSTER, rig.GROUP, rng)
    assert short.startswith("demo-small-worker-") and len(short) == len("demo-small-worker-") + 5
    _, worker = rig.rendered("ns")
    assert not plan.is_dynamic_name(worker["metadata"]["name"], rig.CLUSTER, rig.GROUP)


def _python39() -> str | None:
    """A working Python 3.9 (a pyenv shim may name one it cannot run)."""
    found = [*sorted(Path("/root/.pyenv/versions").glob("3.9*/bin/python3.9"))]
    which = shutil.which("python3.9")
    for candidate in [*map(str, found), *([which] if which else [])]:
        probe = subprocess.run([candidate, "-c", "pass"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return candidate
    return None


def test_the_file_runs_under_python_3_9_with_the_standard_library_only(
    kube_api: KubeApi, kube: KubeClient
) -> None:
    python = _python39()
    if python is None:
        pytest.skip("no Python 3.9 interpreter on this machine")
    ns = kube_api.namespace
    _state(kube, ns)
    script = (
        "import json, kuberay_gitops_autoscaler as m\n"
        f"p = m.PodProvider({{'namespace': {ns!r}, 'cluster': 'demo'}}, 'demo')\n"
        "names = p.create_node({}, {'ray-user-node-type': 'small'}, 2)\n"
        "print(json.dumps(sorted(names)))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(provider_module.__file__).parent)}
    env[provider_module.API_URL_ENV] = kube_api.fake.url
    done = subprocess.run(
        # -S: no site-packages, so no Ray and nothing but the standard library.
        [python, "-S", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    names = json.loads(done.stdout)
    assert len(names) == 2 and set(rig.state_data(kube, ns)) == set(names)
