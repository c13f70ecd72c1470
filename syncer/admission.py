"""The admission boundary of an install: a ValidatingAdmissionPolicy and its binding (DESIGN §1.1).

The syncer takes its instructions from labelled ConfigMaps and acts on labelled objects, and
labels are written by whoever may write the object. This policy makes the labels a trust
root: in the watched namespaces (and on cluster-scoped objects) only the configured GitOps
identities, the syncer's own ServiceAccount and the cluster's own components may create,
change or delete an object that carries the renderer's labels (`app.kubernetes.io/managed-by:
kuberay-render`) or the syncer's (`kuberay-syncer`, any `kuberay.io/role`), and so only they
may add those labels to an object or take them off. A second, optional policy
(`worker_pod_policy_objects`) bounds the Pods the syncer itself creates (the autoscaling
workers). Both are pure; the CEL is evaluated by the API server
(admissionregistration.k8s.io/v1, Kubernetes 1.30+).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from renderer import naming

Manifest = dict[str, Any]

API_VERSION: Final = "admissionregistration.k8s.io/v1"
# The values of app.kubernetes.io/managed-by that mark an object as the renderer's or the syncer's.
MANAGED_VALUES: Final = (naming.MANAGED_BY_VALUE, "kuberay-syncer")
# The cluster's own writers of such objects: the Job, garbage-collector, EndpointSlice and
# namespace controllers (as one user, or one ServiceAccount each in kube-system), the
# scheduler (preemption deletes pods), kubelets (the final delete of a terminated pod;
# NodeRestriction keeps each to its own node's pods) and cluster admins (who could remove the
# policy anyway).
SYSTEM_USERS: Final = ("system:kube-controller-manager", "system:kube-scheduler")
SYSTEM_GROUPS: Final = ("system:masters", "system:nodes", "system:serviceaccounts:kube-system")
GROUP_PREFIX: Final = "group:"


def _cel_str(value: str) -> str:
    """A single-quoted CEL string literal (ValueError: a quote or backslash in `value`)."""
    if "'" in value or "\\" in value or "\n" in value:
        raise ValueError(f"invalid identity {value!r}: a quote, backslash or newline")
    return f"'{value}'"


def _cel_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(_cel_str(v) for v in values) + "]"


def _carries_labels(obj: str) -> str:
    """CEL: `obj` (object or oldObject) exists and carries a renderer or syncer label."""
    labels = f"{obj}.metadata.labels"
    key = _cel_str(naming.MANAGED_BY)
    return (
        # `type(x) != null_type`, not `x != null`: the same in cel-go, and evaluable by
        # cel-python (the tests' evaluator), which has no map-to-null comparison.
        f"type({obj}) != null_type && has({obj}.metadata) && has({labels}) && "
        f"(({key} in {labels} && {labels}[{key}] in {_cel_list(MANAGED_VALUES)}) || "
        f"{_cel_str(naming.ROLE)} in {labels})"
    )


def _allowed(users: Sequence[str], groups: Sequence[str]) -> str:
    return (
        f"request.userInfo.username in {_cel_list(users)} || "
        f"(has(request.userInfo.groups) && "
        f"request.userInfo.groups.exists(g, g in {_cel_list(groups)}))"
    )


def _message(name: str) -> str:
    """CEL: why a request was refused (`name` is a DNS label, safe inside a CEL string)."""
    what = (
        "(request.operation == 'CREATE' ? 'create' : request.operation == 'DELETE' ? 'delete' : "
        "!variables.before ? 'add kuberay labels to' : "
        "!variables.after ? 'remove kuberay labels from' : 'change')"
    )
    return (
        f"'user ' + request.userInfo.username + ' may not ' + {what} + ' ' + "
        f"request.resource.resource + ' ' + request.name + ': objects labelled "
        f"{naming.MANAGED_BY}={MANAGED_VALUES[0]} or {MANAGED_VALUES[1]}, or {naming.ROLE}, "
        f"are written only by the GitOps identities and the syncer (policy {name})'"
    )


def _binding(name: str, watch_namespaces: Sequence[str], labels: dict[str, str]) -> Manifest:
    """The binding of policy `name` that denies, in the watched namespaces (`["*"]`: all)."""
    spec: Manifest = {"policyName": name, "validationActions": ["Deny"]}
    if list(watch_namespaces) != ["*"]:
        spec["matchResources"] = {
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": sorted(watch_namespaces),
                    }
                ]
            }
        }
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": spec,
    }


def split_identities(identities: Sequence[str]) -> tuple[list[str], list[str]]:
    """Users and groups (`group:NAME`) of `identities`, each sorted and unique.

    Raises:
        ValueError: an identity is empty or a bare `group:`.
    """
    users: set[str] = set()
    groups: set[str] = set()
    for identity in identities:
        name = identity.removeprefix(GROUP_PREFIX) if identity.startswith(GROUP_PREFIX) else None
        if not identity.strip() or name == "":
            raise ValueError(f"invalid GitOps identity {identity!r}")
        if name is None:
            users.add(identity)
        else:
            groups.add(name)
    return sorted(users), sorted(groups)


def policy_name(namespace: str) -> str:
    """The cluster-scoped name of the policy and binding of the install in `namespace`."""
    return f"kuberay-syncer-{namespace}-labels"


def policy_objects(
    *,
    namespace: str,
    service_account: str,
    identities: Sequence[str],
    watch_namespaces: Sequence[str],
    labels: dict[str, str],
) -> list[Manifest]:
    """The ValidatingAdmissionPolicy and its binding for the install in `namespace`.

    `identities` are the GitOps appliers' user names (e.g.
    `system:serviceaccount:argocd:argocd-application-controller`) or `group:NAME`;
    `watch_namespaces` `["*"]` binds the policy in every namespace.

    Raises:
        ValueError: no identity, or an invalid one.
    """
    if not identities:
        raise ValueError("the admission policy needs at least one GitOps identity")
    users, groups = split_identities(identities)
    syncer = f"system:serviceaccount:{namespace}:{service_account}"
    all_users = sorted({*users, syncer, *SYSTEM_USERS})
    all_groups = sorted({*groups, *SYSTEM_GROUPS})
    name = policy_name(namespace)
    policy: Manifest = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                # Every resource but no subresource: pods/status, pods/binding and
                # pods/eviction stay with their writers.
                "resourceRules": [
                    {
                        "apiGroups": ["*"],
                        "apiVersions": ["*"],
                        "resources": ["*"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                    }
                ]
            },
            "variables": [
                {"name": "before", "expression": _carries_labels("oldObject")},
                {"name": "after", "expression": _carries_labels("object")},
                {"name": "allowed", "expression": _allowed(all_users, all_groups)},
            ],
            "validations": [
                {
                    "expression": "!(variables.before || variables.after) || variables.allowed",
                    "messageExpression": _message(name),
                    "reason": "Forbidden",
                }
            ],
        },
    }
    return [policy, _binding(name, watch_namespaces, labels)]


# --- the Pods the syncer creates (autoscaling workers) ---------------------------------------

# Ray's generateName alphabet in the provider's names `<cluster>-<group>-worker-<5>`: a
# rendered worker's name (`...-worker-<hash>-<index>`) never matches, so no git-declared name.
WORKER_NAME_RE: Final = "-worker-[bcdfghjklmnpqrstvwxz2456789]{5}$"
WORKER_LABELS: Final = (
    naming.MANAGED_BY,
    naming.RAY_NODE_TYPE,
    naming.RAY_CLUSTER,
    naming.RAY_GROUP,
)


def _not_set(path: str, field: str) -> str:
    """CEL: boolean `<path>.<field>` is absent or false."""
    return f"!(has({path}.{field}) && {path}.{field})"


def _unprivileged(containers: str) -> str:
    """CEL: no container of the list `containers` (may be absent) is privileged."""
    sc = "c.securityContext"
    each = f"!has({sc}) || {_not_set(sc, 'privileged')}"
    return f"!has({containers}) || {containers}.all(c, {each})"


def worker_pod_rules() -> list[tuple[str, str]]:
    """(CEL expression, message) of each check on a Pod the syncer creates."""
    labels = "variables.labels"
    spec = "object.spec"
    return [
        (
            f"{_cel_list(WORKER_LABELS)}.all(k, k in {labels} && {labels}[k] != '') && "
            f"{labels}[{_cel_str(naming.MANAGED_BY)}] == 'kuberay-syncer' && "
            f"{labels}[{_cel_str(naming.RAY_NODE_TYPE)}] == 'worker'",
            "a Pod the syncer creates is a Ray worker: labels "
            f"{naming.MANAGED_BY}=kuberay-syncer, {naming.RAY_NODE_TYPE}=worker, "
            f"{naming.RAY_CLUSTER} and {naming.RAY_GROUP}",
        ),
        (
            f"object.metadata.name.matches({_cel_str(WORKER_NAME_RE)})",
            "a Pod the syncer creates is named <cluster>-<group>-worker-<5 characters>",
        ),
        (
            "has(object.metadata.ownerReferences) && size(object.metadata.ownerReferences) == 1"
            " && object.metadata.ownerReferences.all(o, o.apiVersion == 'v1' && o.kind == 'Pod')",
            "a Pod the syncer creates has exactly one owner: its cluster's head Pod",
        ),
        (
            " && ".join(_not_set(spec, f) for f in ("hostNetwork", "hostPID", "hostIPC")),
            "a Pod the syncer creates uses no host network, PID or IPC namespace",
        ),
        (
            f"!has({spec}.volumes) || {spec}.volumes.all(v, !has(v.hostPath))",
            "a Pod the syncer creates mounts no hostPath volume",
        ),
        (
            f"({_unprivileged(f'{spec}.containers')}) && "
            f"({_unprivileged(f'{spec}.initContainers')})",
            "a Pod the syncer creates runs no privileged container",
        ),
    ]


def worker_pod_policy_name(namespace: str) -> str:
    """The cluster-scoped name of the worker-Pod policy and binding of the install."""
    return f"kuberay-syncer-{namespace}-worker-pods"


def worker_pod_policy_objects(
    *,
    namespace: str,
    service_account: str,
    watch_namespaces: Sequence[str],
    labels: dict[str, str],
) -> list[Manifest]:
    """A ValidatingAdmissionPolicy that bounds the Pods the syncer's ServiceAccount creates.

    The syncer creates Pods only as the autoscaling actuator: dynamic workers built from a
    rendered template. The policy holds every Pod it creates to that shape (the worker
    labels, the provider's name shape, one owner that is a Pod) and refuses the ways out of
    a container (host namespaces, hostPath, privileged). It does not compare the Pod with
    its group's template: CEL cannot parse the template (a JSON string in the ConfigMap),
    and with the ConfigMaps as params each one is evaluated alone, so "this cluster has a
    template" cannot be expressed. A template that needs hostPath or privileged therefore
    cannot be scaled with this policy on.
    """
    syncer = f"system:serviceaccount:{namespace}:{service_account}"
    name = worker_pod_policy_name(namespace)
    policy: Manifest = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "operations": ["CREATE"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "by-the-syncer",
                    "expression": f"request.userInfo.username == {_cel_str(syncer)}",
                }
            ],
            "variables": [
                {
                    "name": "labels",
                    "expression": "has(object.metadata.labels) ? object.metadata.labels : {}",
                }
            ],
            "validations": [
                {
                    "expression": expression,
                    "message": f"{message} (policy {name})",
                    "reason": "Forbidden",
                }
                for expression, message in worker_pod_rules()
            ],
        },
    }
    return [policy, _binding(name, watch_namespaces, labels)]
