"""The opt-in hardening of `kuberay syncer-manifests`: admission policy, NetworkPolicy, PDB.

The ValidatingAdmissionPolicy's CEL is evaluated here with cel-python over the requests a
tenant, the GitOps identity, the syncer and the cluster's controllers send (the real API
server enforces it in tests/realapi/test_admission.py); every object validates against the
Kubernetes schemas.
"""

from __future__ import annotations

import functools
from typing import Any

import celpy
import pytest
import yaml
from click.testing import CliRunner, Result

from renderer.cli import main
from renderer.options import DEFAULT_SYNCER_NAMESPACE, DEFAULT_SYNCER_POD_LABELS
from syncer import admission
from syncer import install as build
from tests.paths import REPO
from tests.validation import validate_object

Manifest = dict[str, Any]
ARGO = "system:serviceaccount:argocd:argocd-application-controller"
SYNCER = "system:serviceaccount:kuberay-system:kuberay-syncer"
RENDERED = {"app.kubernetes.io/managed-by": "kuberay-render", "ray.io/cluster": "c"}
STATUS = {"app.kubernetes.io/managed-by": "kuberay-syncer", "kuberay.io/role": "status"}
PLAIN = {"team": "a"}


def manifests(watch: list[str] | None = None, **hardening: Any) -> list[Manifest]:
    return build.build_syncer_manifests(
        namespace="kuberay-system",
        image=build.DEFAULT_IMAGE,
        watch_namespaces=watch or ["ml"],
        hardening=build.Hardening(**hardening),
    )


def of_kind(objects: list[Manifest], kind: str) -> list[Manifest]:
    return [o for o in objects if o["kind"] == kind]


def test_every_hardening_object_validates_strictly() -> None:
    objects = manifests(
        admission_identities=(ARGO, "group:flux"), network_policy=True, priority_class="high"
    )
    kinds = {o["kind"] for o in objects}
    assert {
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    } <= kinds
    for obj in objects:
        assert validate_object(obj) == [], obj["kind"]


def test_a_disruption_budget_keeps_one_replica_only_when_there_is_a_standby() -> None:
    [budget] = of_kind(manifests(), "PodDisruptionBudget")
    assert budget["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-syncer"}},
    }
    single = build.build_syncer_manifests(
        namespace="kuberay-system", image="i", watch_namespaces=[], replicas=1
    )
    assert not of_kind(single, "PodDisruptionBudget")  # it would block every node drain


def test_priority_class_reaches_the_pods_and_is_checked() -> None:
    [deployment] = of_kind(manifests(priority_class="kuberay-high"), "Deployment")
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "kuberay-high"
    with pytest.raises(ValueError, match="invalid priority class name 'Bad_Name'"):
        manifests(priority_class="Bad_Name")


def test_the_run_as_ids_are_the_dockerfiles_user() -> None:
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8").splitlines()
    user = [line.split()[1] for line in dockerfile if line.startswith("USER ")][-1]
    assert user.split(":")[0] == str(build.RUN_AS)


def test_network_policy_admits_probes_and_reaches_only_api_dns_and_dashboards() -> None:
    assert not of_kind(manifests(), "NetworkPolicy")  # opt-in
    [policy] = of_kind(manifests(["ml", "data"], network_policy=True), "NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "kuberay-syncer"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [
        {"ports": [{"port": "health", "protocol": "TCP"}, {"port": "metrics", "protocol": "TCP"}]}
    ]
    api, dns, dashboards = spec["egress"]
    assert api == {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}
    assert dns == {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    assert dashboards == {
        "to": [
            {
                "podSelector": {"matchLabels": {"ray.io/node-type": "head"}},
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": ["data", "ml"],
                        }
                    ]
                },
            }
        ],
        "ports": [{"port": 8265, "protocol": "TCP"}],
    }
    [everywhere] = of_kind(
        manifests(
            ["*"],
            network_policy=True,
            api_server_ports=(8443,),
            api_server_cidrs=("10.0.0.1/32",),
            dashboard_ports=(8265, 9000),
        ),
        "NetworkPolicy",
    )
    api, _, dashboards = everywhere["spec"]["egress"]
    assert api == {
        "ports": [{"port": 8443, "protocol": "TCP"}],
        "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
    }
    assert dashboards["to"][0]["namespaceSelector"] == {}
    assert [p["port"] for p in dashboards["ports"]] == [8265, 9000]


@pytest.mark.parametrize(
    ("hardening", "message"),
    [
        ({"api_server_cidrs": ("10.0.0.300/8",)}, "invalid API server CIDR '10.0.0.300/8'"),
        ({"dashboard_ports": (0,)}, "invalid port 0"),
        ({"admission_identities": ("group:",)}, "invalid GitOps identity 'group:'"),
        ({"admission_identities": (" ",)}, "invalid GitOps identity ' '"),
        ({"admission_identities": ("it's",)}, "a quote, backslash or newline"),
    ],
)
def test_bad_hardening_is_refused(hardening: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        manifests(**hardening)


# --- the admission policy ---------------------------------------------------------------


def policy_and_binding(watch: list[str] | None = None) -> tuple[Manifest, Manifest]:
    objects = manifests(watch, admission_identities=(ARGO, "group:flux-appliers"))
    [policy] = of_kind(objects, "ValidatingAdmissionPolicy")
    [binding] = of_kind(objects, "ValidatingAdmissionPolicyBinding")
    return policy, binding


def test_the_binding_covers_the_watched_namespaces_and_denies() -> None:
    policy, binding = policy_and_binding(["ml", "data"])
    name = "kuberay-syncer-kuberay-system-labels"
    assert policy["metadata"]["name"] == binding["spec"]["policyName"] == name
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["validationActions"] == ["Deny"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    assert selector["matchExpressions"][0]["values"] == ["data", "ml"]
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["*"]  # every kind the renderer emits, and no subresource
    assert rule["operations"] == ["CREATE", "UPDATE", "DELETE"]
    _, everywhere = policy_and_binding(["*"])
    assert "matchResources" not in everywhere["spec"]
    assert not of_kind(manifests(), "ValidatingAdmissionPolicy")  # opt-in
    with pytest.raises(ValueError, match="at least one GitOps identity"):
        admission.policy_objects(
            namespace="n", service_account="s", identities=(), watch_namespaces=["n"], labels={}
        )


@functools.cache
def _programs() -> tuple[dict[str, Any], Any, Any]:
    policy, _ = policy_and_binding()
    env = celpy.Environment()
    variables = {
        v["name"]: env.program(env.compile(v["expression"])) for v in policy["spec"]["variables"]
    }
    [validation] = policy["spec"]["validations"]
    check = env.program(env.compile(validation["expression"]))
    message = env.program(env.compile(validation["messageExpression"]))
    return variables, check, message


def admit(
    user: str,
    operation: str,
    before: dict[str, str] | None,
    after: dict[str, str] | None,
    groups: tuple[str, ...] = ("system:authenticated",),
) -> str | None:
    """None when the policy admits the request, else its message (CEL by cel-python)."""
    to_cel = celpy.json_to_cel  # type: ignore[attr-defined]

    def obj(labels: dict[str, str] | None) -> Manifest | None:
        if labels is None:
            return None
        return {"metadata": {"name": "x", "labels": labels}} if labels else {"metadata": {}}

    request = {
        "operation": operation,
        "name": "x",
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "userInfo": {"username": user, "groups": list(groups)},
    }
    activation = {
        "object": to_cel(obj(after)),
        "oldObject": to_cel(obj(before)),
        "request": to_cel(request),
    }
    variables, check, message = _programs()
    values: dict[str, bool] = {}
    for name, program in variables.items():
        activation["variables"] = to_cel(values)
        result = program.evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), (name, result)
        values[name] = bool(result)
    activation["variables"] = to_cel(values)
    allowed = check.evaluate(activation)
    assert isinstance(allowed, celpy.celtypes.BoolType), allowed
    return None if allowed else str(message.evaluate(activation))


TENANT = "system:serviceaccount:ml:ci"


@pytest.mark.parametrize(
    ("operation", "before", "after", "verb"),
    [
        ("CREATE", None, RENDERED, "create"),
        ("CREATE", None, STATUS, "create"),
        ("CREATE", None, {"kuberay.io/role": "intent"}, "create"),
        ("UPDATE", RENDERED, {**RENDERED, "x": "y"}, "change"),
        ("UPDATE", PLAIN, {**PLAIN, **RENDERED}, "add kuberay labels to"),
        ("UPDATE", {}, STATUS, "add kuberay labels to"),
        ("UPDATE", RENDERED, PLAIN, "remove kuberay labels from"),
        ("UPDATE", STATUS, {"app.kubernetes.io/managed-by": "kuberay-syncer"}, "change"),
        ("UPDATE", STATUS, {"app.kubernetes.io/managed-by": "me"}, "remove kuberay labels"),
        ("DELETE", RENDERED, None, "delete"),
        ("DELETE", STATUS, None, "delete"),
    ],
)
def test_a_tenant_is_refused_every_write_touching_kuberay_labels(
    operation: str, before: dict[str, str] | None, after: dict[str, str] | None, verb: str
) -> None:
    message = admit(TENANT, operation, before, after)
    assert message is not None
    assert message.startswith(f"user {TENANT} may not {verb}")
    assert "(policy kuberay-syncer-kuberay-system-labels)" in message


@pytest.mark.parametrize(
    ("operation", "before", "after"),
    [
        ("CREATE", None, PLAIN),
        ("CREATE", None, {}),
        ("UPDATE", PLAIN, {"team": "b"}),
        # Another tool's managed-by value is not ours.
        ("UPDATE", {"app.kubernetes.io/managed-by": "helm"}, {"app.kubernetes.io/managed-by": "x"}),
        ("DELETE", PLAIN, None),
    ],
)
def test_a_tenant_keeps_every_write_to_its_own_objects(
    operation: str, before: dict[str, str] | None, after: dict[str, str] | None
) -> None:
    assert admit(TENANT, operation, before, after) is None


@pytest.mark.parametrize(
    ("user", "groups"),
    [
        (ARGO, ()),
        ("someone", ("flux-appliers",)),  # a configured group
        (SYNCER, ()),
        ("system:kube-controller-manager", ()),  # Job, GC, EndpointSlice controllers
        (
            "system:serviceaccount:kube-system:job-controller",
            ("system:serviceaccounts:kube-system",),
        ),
        ("system:kube-scheduler", ()),  # preemption deletes pods
        ("system:node:n1", ("system:nodes",)),  # a kubelet's final delete
        ("admin", ("system:masters",)),
    ],
)
def test_the_gitops_identities_the_syncer_and_the_cluster_write_them(
    user: str, groups: tuple[str, ...]
) -> None:
    for operation, before, after in (
        ("CREATE", None, RENDERED),
        ("UPDATE", RENDERED, PLAIN),
        ("DELETE", STATUS, None),
    ):
        assert admit(user, operation, before, after, groups) is None, (user, operation)


def test_another_installs_syncer_is_not_this_ones() -> None:
    other = "system:serviceaccount:other:kuberay-syncer"
    assert admit(other, "CREATE", None, STATUS) is not None


# --- the CLI ------------------------------------------------------------------------------


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["syncer-manifests", *args])


def test_cli_hardening_options_reach_the_objects() -> None:
    result = run(
        "--watch-namespace", "ml", "--admission-policy", "--gitops-identity", ARGO,
        "--network-policy", "--api-server-port", "8443", "--dashboard-port", "9000",
        "--priority-class", "high",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    documents = list(yaml.safe_load_all(result.stdout))
    [policy] = [d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"]
    allowed = next(v for v in policy["spec"]["variables"] if v["name"] == "allowed")
    assert f"'{ARGO}'" in allowed["expression"]
    [network] = [d for d in documents if d["kind"] == "NetworkPolicy"]
    assert network["spec"]["egress"][0]["ports"] == [{"port": 8443, "protocol": "TCP"}]
    assert network["spec"]["egress"][2]["ports"] == [{"port": 9000, "protocol": "TCP"}]
    [deployment] = [d for d in documents if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == "high"


def test_cli_wants_an_identity_with_the_admission_policy_and_only_then() -> None:
    alone = run("--admission-policy")
    assert alone.exit_code == 2
    assert alone.stderr == "error: --admission-policy needs at least one --gitops-identity\n"
    stray = run("--gitops-identity", ARGO)
    assert stray.exit_code == 2
    assert stray.stderr == "error: --gitops-identity is used only with --admission-policy\n"


def test_the_renderers_syncer_allowance_selects_the_installed_pods() -> None:
    # A DenyAll networkPolicy admits pods with these labels in this namespace (renderer L6).
    [deployment] = of_kind(
        build.build_syncer_manifests(
            namespace=build.DEFAULT_NAMESPACE, image="i", watch_namespaces=[]
        ),
        "Deployment",
    )
    assert deployment["metadata"]["namespace"] == DEFAULT_SYNCER_NAMESPACE
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels == dict(DEFAULT_SYNCER_POD_LABELS)
