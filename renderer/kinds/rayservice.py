"""The RayService pipeline: one cluster generation, its Services, Serve config and intent.

`check -> parse -> check_model -> build`, run by `kinds.pipeline.run`. Owns the RayService
half of DESIGN §2-§3 (rayservice.md §3; `<gen>` is `<svc>-<hash of rayClusterConfig>`):

- the generation: every object of the cluster `<gen>`, the ConfigMap `<gen>-serve-config`
  and, with `NewClusterWithIncrementalUpgrade`, `<gen>-serve-svc`; each labelled
  `ray.io/cluster: <gen>` and, unless the strategy is `None`, protected from pruning, so the
  commit that drops a generation leaves it running until the syncer retires it. Under
  `None` a changed cluster config replaces the generation (KubeRay would ignore the change).
- `<svc>-head-svc` and (strategies `NewCluster` / `None`) the serve Service, selecting the
  pods the syncer marks `kuberay.io/serve-active: "true"` (`objects.serving`).
- incremental upgrades: Gateway `<svc>-gateway` and HTTPRoute `<svc>-httproute`, first rule
  weight 100 to `<gen>-serve-svc` (the syncer owns `spec.rules` after creation).
- the intent ConfigMap `<svc>-kuberay-intent` (`objects.intent`).
Stateless: it never decides which generation is active (the syncer's, at run time). Pure.
"""

from __future__ import annotations

from renderer import naming
from renderer.errors import Problem
from renderer.kinds.pipeline import Built, Kind
from renderer.manifest import Manifest
from renderer.model.rayservice import RayServicePlan, parse_rayservice, route_port
from renderer.objects import cluster as cluster_objects
from renderer.objects import gateway, intent, serveconfig, serving
from renderer.options import RenderOptions
from renderer.rules import batchscheduler as batch_rules
from renderer.rules import rayservice as rules
from schemas.intent import NONE


def check(doc: Manifest, options: RenderOptions) -> list[Problem]:
    """KubeRay's RayService rules on the document (and the RayCluster rules on its config)."""
    return rules.check_rayservice(doc, options)


def parse(doc: Manifest, options: RenderOptions) -> RayServicePlan:
    """The RayService model, with its current generation parsed as a cluster."""
    return parse_rayservice(doc, options)


def check_model(service: RayServicePlan, options: RenderOptions) -> list[Problem]:
    """The checks KubeRay makes only while reconciling."""
    labels = service.cluster.labels
    return (
        rules.check_plan(service)
        + batch_rules.check_parent(labels, options)
        + batch_rules.check_kueue(
            labels, options, service.cluster.spec, spec_path=("spec", "rayClusterConfig")
        )
    )


def _generation(service: RayServicePlan, options: RenderOptions) -> list[Manifest]:
    generation = cluster_objects.schedule(
        service.cluster,
        cluster_objects.build_cluster(service.cluster, options),
        options,
        serving=True,
    )
    generation.append(serveconfig.build_serve_config(service))
    if service.incremental:
        generation.append(serving.build_generation_serve_service(service))
    for obj in generation:
        serving.mark_generation(obj, service.cluster.name, protect=service.strategy != NONE)
    return generation


def _gateway(service: RayServicePlan) -> list[Manifest]:
    labels = service.source_labels
    upgrade = service.spec["upgradeStrategy"]["clusterUpgradeOptions"]
    backend = gateway.Backend(
        naming.serve_service_name(service.cluster.name), route_port(service.cluster), 100
    )
    return [
        gateway.build_gateway(
            service.name, service.namespace, str(upgrade["gatewayClassName"]), labels
        ),
        gateway.build_httproute(service.name, service.namespace, [backend], labels),
    ]


def build(service: RayServicePlan, options: RenderOptions) -> Built:
    """The stable Services, the generation (unless suspended), the Gateway and the intent."""
    problems: list[Problem] = []
    objects: list[Manifest] = []
    serve_name: str | None = None
    if not service.incremental:
        problems, serve = serving.build_serve_service(service)
        serve_name = serve["metadata"]["name"]
        objects.append(serve)
    if service.spec.get("suspend") is True:
        # KubeRay deletes everything it owns; only the intent stays, for the syncer.
        return problems, [intent.build_rayservice_intent(service, options, None, serve_name)]
    generation = _generation(service, options)
    objects.extend(generation)
    objects.append(serving.build_head_service(service, options))
    if service.incremental:
        objects.extend(_gateway(service))
    objects.append(intent.build_rayservice_intent(service, options, generation, serve_name))
    return problems, objects


def count_pods(service: RayServicePlan) -> int:
    """The Pods of the current generation; none while the RayService is suspended."""
    cluster = service.cluster
    if service.spec.get("suspend") is True or cluster.suspended:
        return 0
    return 1 + sum(group.pod_count for group in cluster.workers)


KIND: Kind[RayServicePlan] = Kind(check, parse, check_model, build, count_pods)
