"""The RayService state machine (reference rayservice.md §4-§10), as a pure function.

`decide(observation, settings)` takes the rendered intent, the last published status, the
live generations (pods, Serve config and facts), the HTTPRoute and the Gateway, and returns
the status to publish and the actions to take. It reads no clock and does no I/O. This
module holds the frame of a pass (who is active, which strategy runs, labels, retirement,
conditions); the strategies are `switching` and `upgrade`, the working state `state.Pass`.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from renderer import naming
from syncer.rayservice import switching, upgrade
from syncer.rayservice.intent import ANN_ABORT, ANN_PAUSED
from syncer.rayservice.observed import Pod
from syncer.rayservice.record import (
    PAUSED,
    READY,
    REASON_ABORTED,
    ROLLBACK,
    SUSPENDED,
    SUSPENDING,
    UPGRADE,
    Condition,
    Record,
)
from syncer.rayservice.routing import route_weights
from syncer.rayservice.state import Action, Decision, Label, Observation, Pass, Retire, Settings

# Differences from KubeRay, by design: generations are content-hashed and found by label;
# an old generation keeps its own Serve config (KubeRay's restart hazard §14.9 cannot
# happen); deletion delays survive restarts; a rollback moves traffic back even when the
# Gateway is not ready or the new generation is unreachable (the §8.7 stall cannot happen);
# and there are pause, abort and progress-deadline controls (`kuberay.io/upgrade-paused`
# in git or on the live HTTPRoute, `kuberay.io/upgrade-abort` on the live HTTPRoute,
# `kuberay.io/upgrade-progress-deadline-seconds` in git).

# KubeRay's condition texts (rayservice.md §10.2, §11.1).
_READY_TRUE: Final = (
    READY,
    "True",
    "NonZeroServeEndpoints",
    "Number of serve endpoints is greater than 0",
)
_READY_DROPPED: Final = (
    READY,
    "False",
    "ZeroServeEndpoints",
    "Number of serve endpoints dropped to 0",
)
_READY_INITIALIZING: Final = (READY, "False", "Initializing", "RayService is initializing")
_UPGRADE_BOTH: Final = (
    UPGRADE,
    "True",
    "BothActivePendingClustersExist",
    "Both active and pending Ray clusters exist",
)
_UPGRADE_NONE: Final = (
    UPGRADE,
    "False",
    "NoPendingCluster",
    "Active Ray cluster exists and no pending Ray cluster",
)
_UPGRADE_INITIALIZING: Final = (UPGRADE, "False", "Initializing", "RayService is initializing")
_SUSPENDING_READY: Final = (READY, "False", "SuspendInProgress", "RayService is suspending.")
_SUSPENDED_READY: Final = (READY, "False", "SuspendComplete", "RayService is suspended.")
_SUSPENDING: Final = (
    SUSPENDING,
    "True",
    "SuspendInProgress",
    "Waiting for all Kubernetes resources owned by this RayService to be deleted.",
)
_SUSPEND_DONE: Final = (
    SUSPENDING,
    "False",
    "SuspendComplete",
    "All owned resources have been deleted.",
)
_SUSPENDED_TRUE: Final = (
    SUSPENDED,
    "True",
    "SuspendComplete",
    "All owned resources have been deleted.",
)
_SUSPEND_UPGRADE: Final = (UPGRADE, "False", "SuspendInProgress", "No upgrade in progress.")


def decide(observation: Observation, settings: Settings | None = None) -> Decision:
    """One pass of the RayService state machine: observation in, status and actions out."""
    p = Pass(observation, settings or Settings())
    intent = p.intent
    current = intent.generation
    if current is not None and intent.dashboard_url:
        p.dashboards[current] = intent.dashboard_url
    if current is not None and p.failed and p.failed != current:
        p.failed = ""  # git moved on: a new attempt may be made later
    active = _resolve_active(p)
    if current is None:
        _suspend(p)
    elif intent.incremental:
        upgrade.incremental(p, current, active)
    else:
        switching.switch(p, current, active)
    _serve_labels(p)
    _retire(p)
    return _decision(p)


# --- who is active -----------------------------------------------------------------------


def _resolve_active(p: Pass) -> str | None:
    labelled = sorted(g.name for g in p.gens.values() if any(x.serve_active for x in g.pods))
    rec = p.rec
    if len(labelled) > 1:
        # A switch adds the label to the new generation before removing it from the old
        # one; seeing both means it was interrupted, so finish it.
        if rec.pending.name in labelled and rec.active.name in labelled:
            return rec.pending.name
        if p.intent.generation in labelled:
            return p.intent.generation
        if rec.active.name in labelled:
            return rec.active.name
        return labelled[0]
    if labelled:
        return labelled[0]
    # Pods re-created by the GitOps tool come back without the label: trust the record.
    if rec.active.name and rec.active.name in p.gens:
        return rec.active.name
    return None


# --- labels ------------------------------------------------------------------------------


def _serve_labels(p: Pass) -> None:
    """`ray.io/serve` per KubeRay: the head's follows its proxy; workers once deployed."""
    for name in {p.active.name, p.pending.name} - {""}:
        gen = p.gens.get(name)
        if gen is None or not gen.reachable or gen.serve is None or p.config_stale(name):
            continue
        healthy = gen.serve.proxies_healthy and bool(gen.serve.apps)
        for pod in gen.pods:
            if pod.node_type == "head":
                value = "true" if healthy and not p.intent.exclude_head else "false"
                p.label(pod.name, naming.RAY_SERVE, value)
            elif gen.serve.apps:
                p.label(pod.name, naming.RAY_SERVE, "true")


def _final_labels(p: Pass, pod: Pod) -> dict[str, str]:
    labels = dict(pod.labels)
    for key, value in p.want.get(pod.name, {}).items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return labels


def _label_actions(p: Pass) -> list[Label]:
    adds: list[Label] = []
    removes: list[Label] = []
    for gen in sorted(p.gens.values(), key=lambda g: g.name):
        for pod in gen.pods:
            changes = {
                key: value
                for key, value in sorted(p.want.get(pod.name, {}).items())
                if pod.labels.get(key) != value
            }
            if not changes or pod.deleting:
                continue
            action = Label(pod.name, gen.name, changes, pod.resource_version)
            # Traffic first reaches the new pods, then leaves the old ones.
            (removes if changes.get(naming.SERVE_ACTIVE, "") is None else adds).append(action)
    return adds + removes


# --- suspend and retirement ----------------------------------------------------------------


def _suspend(p: Pass) -> None:
    """`spec.suspend`: nothing is served; every generation goes (rayservice.md §11.1)."""
    for gen in p.gens.values():
        for pod in gen.pods:
            if naming.SERVE_ACTIVE in pod.labels:
                p.label(pod.name, naming.SERVE_ACTIVE, None)
    p.suspend_left = len(p.gens)
    p.clear_upgrade()


def _retire(p: Pass) -> None:
    """Delete old generations once they take no traffic, after the deletion delay."""
    keep = {p.intent.generation, p.active.name, p.pending.name} - {None, ""}
    route = p.obs.route
    routed = set(route_weights(route, p.intent.name)) if route is not None else set()
    delay = 0 if p.intent.generation is None else p.intent.deletion_delay_s
    for name in sorted(p.gens):
        gen = p.gens[name]
        if name in keep:
            p.retire_at.pop(name, None)
            p.retired.discard(name)
            continue
        if name in p.retired:
            continue
        if any(pod.serve_active for pod in gen.pods) or name in routed:
            p.wakes.append(p.settings.poll_s)
            continue  # it may still take traffic: labels and route go first
        at = p.retire_at.setdefault(name, p.now + delay)
        if p.now >= at:
            p.retires.append(Retire(name))
            p.retired.add(name)
            p.retire_at.pop(name, None)
            p.event("DeletedRayCluster", f"Deleted the old generation {name}")
        else:
            p.wakes.append(at - p.now)
    live = set(p.gens)
    p.retire_at = {k: v for k, v in p.retire_at.items() if k in live}
    p.retired &= live
    for book in (p.deployed, p.dashboards):
        for name in [k for k in book if k not in live and k not in keep]:
            del book[name]


# --- status ----------------------------------------------------------------------------------


def _endpoints(p: Pass) -> int:
    """Ready pods the serve Service(s) select (KubeRay counts their EndpointSlices)."""
    count = 0
    # Incremental: `<active>-serve-svc` and `<pending>-serve-svc`, once one is active.
    serving = {p.active.name, p.pending.name} - {""} if p.active.name else set()
    for gen in p.gens.values():
        for pod in gen.pods:
            labels = _final_labels(p, pod)
            if not pod.ready or pod.deleting or labels.get(naming.RAY_SERVE) != "true":
                continue
            if p.intent.exclude_head and pod.node_type == "head":
                continue
            if p.intent.incremental:
                selected = gen.name in serving
            else:
                selected = labels.get(naming.SERVE_ACTIVE) == "true"
            count += selected
    return count


def _conditions(p: Pass, endpoints: int) -> tuple[Condition, ...]:
    """Conditions per rayservice.md §10.2 (and §11.1 for suspend), plus the project's."""
    wanted: list[tuple[str, str, str, str]] = []
    if p.intent.generation is None:
        if p.suspend_left:
            wanted += [_SUSPENDING_READY, _SUSPENDING, _SUSPEND_UPGRADE]
        else:
            wanted += [_SUSPENDED_READY, _SUSPEND_DONE, _SUSPENDED_TRUE, _SUSPEND_UPGRADE]
        return _merge_conditions(p, wanted)
    if endpoints > 0:
        wanted.append(_READY_TRUE)
    elif p.rec.is_true(READY):
        wanted.append(_READY_DROPPED)
    else:
        wanted.append(_READY_INITIALIZING)
    if p.held:
        hint = (
            f"remove {ANN_ABORT} from the HTTPRoute to resume"
            if p.held == REASON_ABORTED
            else "change the spec to try again"
        )
        message = f"the upgrade to {p.pending.name} is held at 0% ({p.held}); {hint}"
        wanted.append((UPGRADE, "False", p.held, message))
    elif p.active.name and p.pending.name:
        wanted.append(_UPGRADE_BOTH)
    elif p.active.name:
        wanted.append(_UPGRADE_NONE)
    else:
        wanted.append(_UPGRADE_INITIALIZING)
    if p.rollback is not None:
        wanted.append((ROLLBACK, "True", *p.rollback))
    if p.paused and p.pending.name:
        message = f"{ANN_PAUSED} is set: traffic and target_capacity stay where they are"
        wanted.append((PAUSED, "True", "PausedByAnnotation", message))
    return _merge_conditions(p, wanted)


def _merge_conditions(p: Pass, wanted: list[tuple[str, str, str, str]]) -> tuple[Condition, ...]:
    out = []
    for kind, status, reason, message in wanted:
        old = p.rec.condition(kind)
        since = old.since if old is not None and old.status == status else p.now
        out.append(Condition(kind, status, reason, message, since))
    return tuple(out)


def _decision(p: Pass) -> Decision:
    endpoints = _endpoints(p)
    record = Record(
        strategy=p.intent.strategy,
        active=p.active,
        pending=p.pending,
        conditions=_conditions(p, endpoints),
        endpoints=endpoints,
        updated_at=p.rec.updated_at,
        deployed=dict(sorted(p.deployed.items())),
        dashboards=dict(sorted(p.dashboards.items())),
        retire_at=dict(sorted(p.retire_at.items())),
        retired=tuple(sorted(p.retired)),
        upgrade_started=p.upgrade_started,
        unhealthy_since=p.unhealthy_since,
        failed=p.failed,
        error="",  # the reconciler records a failed action
    )
    if p.obs.record is None or record != p.obs.record:
        record = dataclasses.replace(record, updated_at=p.now)
    actions: list[Action] = [*p.deploys]
    if p.route_action is not None:
        actions.append(p.route_action)
    actions.extend(_label_actions(p))
    actions.extend(p.retires)
    actions.extend(p.events)
    if not p.wakes and (p.gens or p.intent.generation is not None):
        # Level-triggered: a switch or a label change also asks for the next look, since
        # the echo of the syncer's own write is not an event it is woken by.
        p.wakes.append(p.settings.poll_s if actions else p.settings.steady_poll_s)
    wake = min(p.wakes) if p.wakes else None
    return Decision(record, tuple(actions), wake)
