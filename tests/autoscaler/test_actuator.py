"""The autoscaling actuator in the running syncer, against the fake API server.

The provider (the file shipped to the head Pod) changes the desired set as Ray's
autoscaler would; the syncer's actuator creates and deletes the worker Pods; the fake
kubelet runs them. Covered: the seed, the exact names and the stripped GitOps keys, the
lowest free replica index, the max cap, deletion of what is no longer desired, quota
failures as Events and a condition, garbage collection with the head, forged ConfigMaps,
and the Argo CD and Flux prune and drift predicates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner

from renderer import naming
from renderer.assets.autoscaler import kuberay_gitops_autoscaler as provider_module
from renderer.assets.autoscaler.kuberay_gitops_autoscaler import PodProvider
from renderer.cli import main
from syncer.autoscaler import pods as actuator_pods
from syncer.autoscaler import report
from syncer.cli import Options, Syncer
from syncer.kube.client import CONFIGMAPS, EVENTS, PODS, KubeClient
from tests.autoscaler import rig
from tests.fakeapi.controllers import Controllers
from tests.fakeapi.fixtures import KubeApi
from tests.syncer.fakedashboard import FakeDashboard
from tests.syncer.harness import wait_until

Manifest = dict[str, Any]
TAGS = {"ray-user-node-type": rig.GROUP, "ray-launch-request": "r1"}


@dataclass
class Rig:
    kube: KubeClient
    syncer: Syncer
    provider: PodProvider
    controllers: Controllers
    namespace: str
    api: KubeApi

    def pods(self) -> list[Manifest]:
        return rig.dynamic_pods(self.kube, self.namespace)

    def names(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.pods()}

    def events(self, reason: str) -> list[Manifest]:
        items, _ = self.kube.list(EVENTS, self.namespace)
        return [e for e in items if e.get("reason") == reason]

    def status(self) -> Manifest:
        cm = self.kube.get(CONFIGMAPS, self.namespace, f"{rig.CLUSTER}-autoscaler-state")
        text = ((cm or {}).get("metadata", {}).get("annotations") or {}).get(
            report.STATUS_ANNOTATION
        )
        return json.loads(text) if text else {}


def _syncer(kube: KubeClient, namespace: str) -> Syncer:
    options = Options(namespaces=(namespace,), workers=2, poll_interval_s=0.2)
    dashboard = FakeDashboard(time.time)
    return Syncer(kube, options, dashboards=lambda url: dashboard)


@pytest.fixture
def arig(kube_api: KubeApi, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    kube_api.fake  # noqa: B018 - the simulators need the fake server
    monkeypatch.setenv(provider_module.API_URL_ENV, kube_api.fake.url)
    kube = KubeClient(kube_api.api_client)
    ns = kube_api.namespace
    provider = PodProvider({"namespace": ns, "cluster": rig.CLUSTER}, rig.CLUSTER)
    controllers = Controllers(kube_api.api_client, namespace=ns).start()
    syncer = _syncer(kube, ns)
    assert syncer.start()
    yield Rig(kube, syncer, provider, controllers, ns, kube_api)
    syncer.stop()
    controllers.stop()
    kube.close()


def _desired(arig: Rig) -> set[str]:
    return set(rig.state_data(arig.kube, arig.namespace))


def test_the_state_is_seeded_and_the_seed_worker_created_from_the_template(arig: Rig) -> None:
    head, template = rig.apply_cluster(arig.kube, arig.namespace)
    state = wait_until(
        lambda: arig.kube.get(CONFIGMAPS, arig.namespace, f"{rig.CLUSTER}-autoscaler-state"),
        what="the state ConfigMap",
    )
    assert state["metadata"]["ownerReferences"][0]["uid"] == head["metadata"]["uid"]
    assert state["metadata"]["labels"] == {
        naming.RAY_CLUSTER: rig.CLUSTER,
        naming.ROLE: "autoscaler-state",
        naming.MANAGED_BY: "kuberay-syncer",
    }
    seeded = rig.state_data(arig.kube, arig.namespace)
    assert list(seeded.values()) == [{"group": rig.GROUP, "request": "seed"}]
    wait_until(lambda: arig.names() == set(seeded), what="the seed worker")
    pod = arig.pods()[0]
    meta = pod["metadata"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": head["metadata"]["name"],
            "uid": head["metadata"]["uid"],
        }
    ]
    labels, annotations = meta["labels"], meta.get("annotations") or {}
    assert labels[naming.MANAGED_BY] == "kuberay-syncer"
    assert labels[naming.RAY_REPLICA_INDEX] == "0"
    for key in (naming.RAY_CLUSTER, naming.RAY_GROUP, naming.RAY_NODE_TYPE, naming.TEMPLATE_HASH):
        assert labels[key] == template["metadata"]["labels"][key]
    for key in [*labels, *annotations]:
        assert not actuator_pods.is_tracking_key(key), key
    assert set(rig.TRACKING_LABELS) & set(template["metadata"]["labels"])  # the test can fail
    assert pod["spec"]["containers"][0]["image"] == template["spec"]["containers"][0]["image"]
    wait_until(lambda: arig.status().get("groups", {}).get(rig.GROUP, {}).get("ready") == 1)
    assert arig.status()["conditions"][0]["status"] == "True"


def test_scale_up_stops_at_max_and_scale_down_deletes_only_what_is_not_desired(
    arig: Rig,
) -> None:
    rig.apply_cluster(arig.kube, arig.namespace)
    wait_until(lambda: len(arig.names()) == 1, what="the seed worker")
    added = list(arig.provider.create_node({}, TAGS, 5) or {})
    wait_until(lambda: len(arig.names()) == 3, what="scale-up to max")
    wait_until(lambda: len(arig.events("MaxReplicas")) == 3, what="the cap reported")
    time.sleep(0.5)  # passes run on every event: the cap must still hold
    assert len(arig.names()) == 3
    indexes = sorted(int(p["metadata"]["labels"][naming.RAY_REPLICA_INDEX]) for p in arig.pods())
    assert indexes == [0, 1, 2]
    running = sorted(arig.names())
    gone = [n for n in running if n in added][:1]
    arig.provider.terminate_nodes(gone)
    # A name over the cap takes the freed place; the leaving Pod holds its index until gone.
    wait_until(lambda: gone[0] not in arig.names() and len(arig.names()) == 3, what="replace")
    indexes = [int(p["metadata"]["labels"][naming.RAY_REPLICA_INDEX]) for p in arig.pods()]
    assert len(set(indexes)) == 3
    assert arig.names() <= _desired(arig)
    wait_until(lambda: arig.status()["groups"][rig.GROUP]["ready"] == 3, what="3 Ready")
    shown = CliRunner().invoke(
        main, ["status", "-n", arig.namespace, "--kubeconfig", str(arig.api.kubeconfig)]
    )
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["NAMESPACE", "CLUSTER"])
    desired = str(len(_desired(arig)))
    expected = [arig.namespace, rig.CLUSTER, rig.GROUP, desired, "3", "3", "3", "True"]
    assert lines[header + 1].split() == expected
    arig.provider.terminate_nodes(sorted(_desired(arig)))
    wait_until(lambda: not arig.names(), what="scale-down to zero")


def test_a_quota_refusal_becomes_an_event_and_a_false_condition(arig: Rig) -> None:
    faults = arig.api.fake.faults
    head, worker = rig.rendered(arig.namespace)
    arig.kube.create(PODS, arig.namespace, head)
    faults.fail(403, verb="create", resource="pods", times=None, message="exceeded quota: q")
    cm = rig.autoscaling_configmap(arig.namespace, rig.worker_template(worker))
    arig.kube.create(CONFIGMAPS, arig.namespace, cm)
    event = wait_until(lambda: arig.events("FailedCreate"), what="the FailedCreate Event")[0]
    assert "exceeded quota" in event["message"]
    assert event["involvedObject"]["kind"] == "Pod"
    condition = wait_until(lambda: arig.status().get("conditions"), what="the condition")[0]
    assert condition["status"] == "False" and condition["reason"] == "CreateFailed"
    faults.clear_rules()
    arig.provider.create_node({}, TAGS, 1)  # any change brings a pass
    wait_until(lambda: len(arig.names()) == 2, what="the workers once quota allows")
    wait_until(lambda: arig.status()["conditions"][0]["status"] == "True")


def test_the_workers_and_the_state_go_with_the_head(arig: Rig) -> None:
    head, _ = rig.apply_cluster(arig.kube, arig.namespace)
    wait_until(lambda: len(arig.names()) == 1, what="the seed worker")
    arig.provider.create_node({}, TAGS, 1)
    wait_until(lambda: len(arig.names()) == 2, what="two workers")
    first = _desired(arig)
    arig.kube.delete(PODS, arig.namespace, head["metadata"]["name"])
    wait_until(lambda: not arig.names(), what="GC of the workers")
    # GitOps re-creates the head: a new incarnation gets a fresh desired set.
    fresh, _ = rig.rendered(arig.namespace)
    arig.kube.create(PODS, arig.namespace, fresh)
    wait_until(lambda: len(arig.names()) == 1, what="the new seed worker")
    assert not (_desired(arig) & first)


def test_forged_autoscaling_configmaps_create_nothing(arig: Rig, kube_api: KubeApi) -> None:
    ns = arig.namespace
    head, worker = rig.rendered(ns)
    arig.kube.create(PODS, ns, head)
    template = rig.worker_template(worker)
    forged = [
        rig.autoscaling_configmap(ns, template, name="other-autoscaling"),
        rig.autoscaling_configmap(ns, template, bounds={"min": 10**6, "max": 10**6}),
    ]
    elsewhere = {**template, "metadata": {**template["metadata"], "namespace": "kube-system"}}
    arig.kube.create(CONFIGMAPS, ns, forged[0])
    wait_until(lambda: arig.events("IntentRefused"), what="the wrong name refused")
    arig.kube.create(CONFIGMAPS, ns, forged[1])
    wait_until(lambda: len(arig.events("IntentRefused")) == 2, what="10^6 refused")
    arig.kube.delete(CONFIGMAPS, ns, f"{rig.CLUSTER}-autoscaling")
    arig.kube.create(CONFIGMAPS, ns, rig.autoscaling_configmap(ns, elsewhere))
    wait_until(lambda: len(arig.events("IntentRefused")) == 3, what="the namespace refused")
    messages = " ".join(e["message"] for e in arig.events("IntentRefused"))
    assert "other-autoscaling" in messages and "kube-system" in messages
    assert "1000000" in messages
    time.sleep(0.3)
    assert arig.names() == set()
    assert arig.kube.get(CONFIGMAPS, ns, f"{rig.CLUSTER}-autoscaler-state") is None
    pod_writes = kube_api.fake.audit.writes(resource="pods")
    assert {r.namespace for r in pod_writes} <= {ns}
    created = {r.name for r in pod_writes if r.verb == "create"}
    assert created == {head["metadata"]["name"]}  # the test's own head, nothing else


def test_desired_entries_that_are_not_worker_names_are_refused(arig: Rig) -> None:
    head, _ = rig.apply_cluster(arig.kube, arig.namespace)
    wait_until(lambda: len(arig.names()) == 1, what="the seed worker")
    # A head-pod user writes names of its own choosing: git's head name, a foreign group.
    entry = json.dumps({"group": rig.GROUP, "request": "x"})
    body = {
        "data": {
            head["metadata"]["name"]: entry,
            "demo-small-worker-abcde-0": entry,
            "demo-other-worker-bcdfg": json.dumps({"group": "other", "request": "x"}),
        }
    }
    arig.kube.patch(CONFIGMAPS, arig.namespace, f"{rig.CLUSTER}-autoscaler-state", body)
    wait_until(lambda: len(arig.events("DesiredRefused")) == 3, what="three refusals")
    assert len(arig.names()) == 1


# --- GitOps predicates ----------------------------------------------------------------------


def _argo_prune_candidates(live: list[Manifest], git_keys: set[tuple[str, str]]) -> list[str]:
    """gitops-engine: managed = tracked and no ownerReferences; prune = managed, not in git,
    and (annotation tracking) its tracking-id names the object itself."""
    found = []
    for obj in live:
        meta = obj["metadata"]
        tracking = (meta.get("annotations") or {}).get("argocd.argoproj.io/tracking-id", "")
        instance = (meta.get("labels") or {}).get("app.kubernetes.io/instance", "")
        if not (tracking or instance) or meta.get("ownerReferences"):
            continue
        key = (obj["kind"], meta["name"])
        self_referenced = tracking.endswith(f"/{obj['kind']}:{meta['namespace']}/{meta['name']}")
        if key not in git_keys and (self_referenced or (instance and not tracking)):
            found.append(meta["name"])
    return found


def _flux_prune_candidates(
    live: list[Manifest], old_inventory: set[tuple[str, str]], new_inventory: set[tuple[str, str]]
) -> list[str]:
    """kustomize-controller: stale = old inventory minus new, still carrying the owner labels."""
    stale = old_inventory - new_inventory
    found = []
    for obj in live:
        labels = obj["metadata"].get("labels") or {}
        owned = all(k in labels for k in rig.TRACKING_LABELS if k.startswith("kustomize."))
        if (obj["kind"], obj["metadata"]["name"]) in stale and owned:
            found.append(obj["metadata"]["name"])
    return found


def _declared(obj: Manifest) -> Manifest:
    meta = obj["metadata"]
    return {
        "labels": meta.get("labels") or {},
        "annotations": {
            k: v
            for k, v in (meta.get("annotations") or {}).items()
            if not k.startswith("status.kuberay.io/")
        },
        "spec": {k: v for k, v in (obj.get("spec") or {}).items() if k != "nodeName"},
        "data": obj.get("data"),
    }


def test_argo_cd_and_flux_find_no_prune_candidates_and_no_drift(arig: Rig) -> None:
    ns = arig.namespace
    head, worker = rig.rendered(ns)
    cm = rig.autoscaling_configmap(ns, rig.worker_template(worker))
    git = []
    for obj in (head, cm):  # as applied by a GitOps tool: tracking keys on the live objects
        tracked = json.loads(json.dumps(obj))
        meta = tracked["metadata"]
        meta.setdefault("annotations", {})["argocd.argoproj.io/tracking-id"] = (
            f"app:/{obj['kind']}:{ns}/{meta['name']}"
        )
        meta["labels"].update(rig.TRACKING_LABELS)
        git.append(tracked)
    applied = [arig.kube.create(PODS, ns, git[0]), arig.kube.create(CONFIGMAPS, ns, git[1])]
    wait_until(lambda: len(arig.names()) == 1, what="the seed worker")
    arig.provider.create_node({}, TAGS, 2)
    wait_until(lambda: len(arig.names()) == 3, what="three workers")
    live = [*arig.kube.list(PODS, ns)[0], *arig.kube.list(CONFIGMAPS, ns)[0]]
    git_keys = {(o["kind"], o["metadata"]["name"]) for o in git}
    assert _argo_prune_candidates(live, git_keys) == []
    assert _flux_prune_candidates(live, git_keys, git_keys) == []
    # Zero drift: the git-declared objects read as they did right after the apply.
    for declared in applied:
        kind = PODS if declared["kind"] == "Pod" else CONFIGMAPS
        current = arig.kube.get(kind, ns, declared["metadata"]["name"])
        assert current is not None
        assert _declared(current) == _declared(declared)
    # No git-declared object replaced or deleted. (The RayCluster reconciler patches the head
    # Pod's `status.kuberay.io/cluster-*` annotations, fields git never declares — DESIGN's
    # ownership contract; the drift check above shows every declared field unchanged.)
    writes = arig.api.fake.audit.writes(namespace=ns)
    touched = {
        r.name
        for r in writes
        if r.verb in ("update", "delete") and r.user_agent == "kuberay-syncer"
    }
    assert not touched & {o["metadata"]["name"] for o in git}, touched
    # Negative control: a worker copied naively (tracking keys kept, no owner) is a candidate.
    naive = json.loads(json.dumps(arig.pods()[0]))
    naive["metadata"].pop("ownerReferences")
    naive["metadata"]["annotations"] = {
        "argocd.argoproj.io/tracking-id": f"app:/Pod:{ns}/{naive['metadata']['name']}"
    }
    naive["metadata"]["labels"].update(rig.TRACKING_LABELS)
    assert _argo_prune_candidates([naive], git_keys) == [naive["metadata"]["name"]]
    stale = git_keys | {("Pod", naive["metadata"]["name"])}
    assert _flux_prune_candidates([naive], stale, git_keys) == [naive["metadata"]["name"]]
