"""The worker-Pod admission policy (`kuberay syncer-manifests --worker-pod-policy`), by CEL.

The policy's own CEL runs in cel-python against the Pod the actuator builds from the
rendered template (`syncer.autoscaler.pods.build`): that Pod is admitted, and each way a
Pod the syncer creates could leave the worker shape is refused with its own message.
Other users' requests do not match the policy (its matchCondition). The real
kube-apiserver enforces the same objects in tests/realapi/test_autoscaler_admission.py.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import celpy
import pytest
from click.testing import CliRunner

from renderer.cli import main
from syncer import admission
from syncer.autoscaler import pods
from syncer.autoscaler.spec import Group
from tests.autoscaler import rig

Manifest = dict[str, Any]
SYNCER = "system:serviceaccount:kuberay-system:kuberay-syncer"
HEAD_UID = "7c1c8d2e-0000-4000-8000-000000000001"


def objects() -> list[Manifest]:
    return admission.worker_pod_policy_objects(
        namespace="kuberay-system",
        service_account="kuberay-syncer",
        watch_namespaces=["ml"],
        labels={},
    )


def worker_pod() -> Manifest:
    """The Pod the actuator creates for the demo cluster's group `small`."""
    head, worker = rig.rendered("ml")
    group = Group(rig.GROUP, 0, 3, 1, rig.worker_template(worker))
    name = "demo-small-worker-b2c4d"
    return pods.build(group, name, 0, "ml", head["metadata"]["name"], HEAD_UID)


@functools.cache
def _programs() -> tuple[Any, Any, list[tuple[Any, str]]]:
    policy = objects()[0]
    env = celpy.Environment()

    def program(text: str) -> Any:
        return env.program(env.compile(text))

    [condition] = policy["spec"]["matchConditions"]
    [variable] = policy["spec"]["variables"]
    checks = [(program(v["expression"]), v["message"]) for v in policy["spec"]["validations"]]
    return program(condition["expression"]), program(variable["expression"]), checks


def refusals(pod: Manifest, user: str = SYNCER) -> list[str] | None:
    """None when the policy does not match the request, else the messages of failed checks."""
    to_cel = celpy.json_to_cel  # type: ignore[attr-defined]
    condition, labels, checks = _programs()
    activation = {"object": to_cel(pod), "request": to_cel({"userInfo": {"username": user}})}
    if not bool(condition.evaluate(activation)):
        return None
    activation["variables"] = to_cel({"labels": labels.evaluate(activation)})
    failed = []
    for check, message in checks:
        result = check.evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), (message, result)
        if not result:
            failed.append(message)
    return failed


def test_the_pod_the_actuator_builds_is_admitted() -> None:
    pod = worker_pod()
    assert pod["spec"]["containers"][0]["image"] == "rayproject/ray:2.52.0"
    assert refusals(pod) == []


def _set(*path: str | int, value: object) -> Callable[[Manifest], None]:
    def change(pod: Manifest) -> None:
        node: Any = pod
        for key in path[:-1]:
            node = node[key] if isinstance(key, int) else node.setdefault(key, {})
        node[path[-1]] = value

    return change


def _drop_label(key: str) -> Callable[[Manifest], None]:
    return lambda pod: pod["metadata"]["labels"].pop(key)


def _host_path(pod: Manifest) -> None:
    pod["spec"].setdefault("volumes", []).append({"name": "h", "hostPath": {"path": "/"}})


def _privileged_init(pod: Manifest) -> None:
    pod["spec"]["initContainers"] = [
        {"name": "i", "image": "busybox", "securityContext": {"privileged": True}}
    ]


def _second_owner(pod: Manifest) -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "u"}
    pod["metadata"]["ownerReferences"].append(owner)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_drop_label("ray.io/cluster"), "is a Ray worker"),
        (_drop_label("ray.io/group"), "is a Ray worker"),
        (
            _set("metadata", "labels", "app.kubernetes.io/managed-by", value="kuberay-render"),
            "Ray worker",
        ),
        (_set("metadata", "labels", "ray.io/node-type", value="head"), "is a Ray worker"),
        (
            _set("metadata", "name", value="demo-small-worker-5f6d7-0"),
            "is named",
        ),  # a rendered name
        (_set("metadata", "name", value="anything"), "is named"),
        (_set("metadata", "ownerReferences", value=[]), "exactly one owner"),
        (_second_owner, "exactly one owner"),
        (_set("metadata", "ownerReferences", 0, "kind", value="ReplicaSet"), "exactly one owner"),
        (_set("spec", "hostNetwork", value=True), "no host network"),
        (_set("spec", "hostPID", value=True), "no host network, PID"),
        (_host_path, "no hostPath"),
        (
            _set("spec", "containers", 0, "securityContext", value={"privileged": True}),
            "no privileged",
        ),
        (_privileged_init, "no privileged"),
    ],
)
def test_a_pod_outside_the_worker_shape_is_refused(
    change: Callable[[Manifest], None], message: str
) -> None:
    pod = copy.deepcopy(worker_pod())
    change(pod)
    failed = refusals(pod)
    assert failed and len(failed) == 1 and message in failed[0], failed
    assert failed[0].endswith("(policy kuberay-syncer-kuberay-system-worker-pods)")


def test_a_false_flag_or_a_plain_security_context_is_admitted() -> None:
    pod = copy.deepcopy(worker_pod())
    pod["spec"]["hostNetwork"] = False
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": False, "runAsUser": 1000}
    pod["spec"]["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    assert refusals(pod) == []


def test_only_the_syncer_is_held_to_it() -> None:
    pod = copy.deepcopy(worker_pod())
    pod["spec"]["hostNetwork"] = True
    assert refusals(pod, user="system:serviceaccount:argocd:argocd-application-controller") is None
    assert refusals(pod, user="system:serviceaccount:other:kuberay-syncer") is None
    assert refusals(pod) is not None


def test_the_cli_adds_it_only_when_asked() -> None:
    def kinds(*args: str) -> list[str]:
        result = CliRunner().invoke(main, ["syncer-manifests", "--watch-namespace", "ml", *args])
        assert result.exit_code == 0, result.output
        return [
            line.split(": ", 1)[1]
            for line in result.stdout.splitlines()
            if line.startswith("kind: ValidatingAdmissionPolicy")
        ]

    assert kinds() == []
    assert kinds("--worker-pod-policy") == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    [policy, binding] = objects()
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0][
        "values"
    ] == ["ml"]
