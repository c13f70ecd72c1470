"""NetworkPolicies of `spec.networkPolicy` (gate RayClusterNetworkPolicy, raycluster.md §1.5.3).

Beyond KubeRay: the head policy of a RayJob's or RayService's cluster admits the syncer's
pods (`RenderOptions.syncer_namespace`/`syncer_pod_labels`) on the dashboard port, since the
syncer ungates, submits, tracks and deploys through it (security review L6).
"""

from __future__ import annotations

from typing import Final

from renderer import naming
from renderer.manifest import Manifest, clone
from renderer.model.raycluster import DEFAULT_DASHBOARD_PORT, RayCluster
from renderer.objects import startparams
from renderer.options import RenderOptions

# The kinds whose clusters the syncer drives through the dashboard (a RayCluster's status
# comes from its pods).
_SYNCER_DIALS: Final = ("RayJob", "RayService")


def _policy(cluster: RayCluster, name: str, group: str, selector: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace,
            "labels": {
                naming.RAY_CLUSTER: cluster.name,
                naming.RAY_GROUP: group,
                naming.APP_NAME: naming.KUBERAY_APP,
                naming.APP_CREATED_BY: naming.KUBERAY_OPERATOR,
                **cluster.source_labels,
            },
        },
        "spec": {"podSelector": {"matchLabels": selector}},
    }


def _restrict(
    policy: Manifest,
    mode: str,
    cluster: RayCluster,
    rules: Manifest,
    extra_ingress: list[Manifest],
) -> None:
    spec = policy["spec"]
    same_cluster = {"podSelector": {"matchLabels": {naming.RAY_CLUSTER: cluster.name}}}
    types: list[str] = []
    if mode in ("DenyAll", "DenyAllIngress"):
        types.append("Ingress")
        spec["ingress"] = [
            {"from": [clone(same_cluster)]},
            *extra_ingress,
            *clone(rules.get("ingressRules") or []),
        ]
    if mode in ("DenyAll", "DenyAllEgress"):
        types.append("Egress")
        spec["egress"] = [{"to": [clone(same_cluster)]}, *clone(rules.get("egressRules") or [])]
    spec["policyTypes"] = types


def _syncer_rule(cluster: RayCluster, options: RenderOptions, port: int) -> list[Manifest]:
    if not options.syncer_namespace or cluster.origin_kind not in _SYNCER_DIALS:
        return []
    peer = {
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": options.syncer_namespace}
        },
        "podSelector": {"matchLabels": dict(sorted(options.syncer_pod_labels.items()))},
    }
    return [{"from": [peer], "ports": [{"protocol": "TCP", "port": port}]}]


def build_network_policies(
    cluster: RayCluster, options: RenderOptions, *, job_name: str | None = None
) -> list[Manifest]:
    """The head policy and one policy per worker group.

    `job_name` is the RayJob that owns the cluster: in K8sJobMode its submitter Pod may
    reach the dashboard port (raycluster.md §1.5.3, head ingress rule 2). The syncer may
    too, for a RayJob's or RayService's cluster (the module docstring).
    """
    config = cluster.spec.get("networkPolicy")
    if config is None:
        return []
    mode = str(config.get("mode") or "DenyAll")
    head = _policy(
        cluster,
        f"{cluster.name}-head",
        naming.HEAD_GROUP,
        {naming.RAY_CLUSTER: cluster.name, naming.RAY_NODE_TYPE: "head"},
    )
    extra: list[Manifest] = []
    params = cluster.head.get("rayStartParams") or {}
    port = startparams.port_param(params, "dashboard-port", DEFAULT_DASHBOARD_PORT)
    # KubeRay lets the submitter in only for a cluster its RayJob labels K8sJobMode: the other
    # modes have no submitter Pod (SidecarMode runs inside the head, covered by rule 1).
    if job_name is not None and cluster.labels.get(naming.RAY_JOB_SUBMISSION_MODE) == "K8sJobMode":
        extra.append(
            {
                "from": [
                    {
                        "podSelector": {
                            "matchLabels": {
                                naming.RAY_ORIGIN_NAME: job_name,
                                naming.RAY_ORIGIN_CRD: "RayJob",
                            }
                        }
                    }
                ],
                "ports": [{"protocol": "TCP", "port": port}],
            }
        )
    extra += _syncer_rule(cluster, options, port)
    _restrict(head, mode, cluster, config.get("head") or {}, extra)
    policies = [head]
    overrides = {g["groupName"]: g for g in config.get("workerGroups") or []}
    for group in cluster.workers:
        policy = _policy(
            cluster,
            f"{cluster.name}-workers-{group.name}",
            group.name,
            {
                naming.RAY_CLUSTER: cluster.name,
                naming.RAY_NODE_TYPE: "worker",
                naming.RAY_GROUP: group.name,
            },
        )
        rules = overrides.get(group.name) or config.get("worker") or {}
        _restrict(policy, mode, cluster, rules, [])
        policies.append(policy)
    return policies
