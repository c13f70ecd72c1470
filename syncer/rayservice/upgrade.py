"""`NewClusterWithIncrementalUpgrade`: traffic moves by HTTPRoute weights, in steps (pure).

Per pass, in KubeRay's order (rayservice.md §8.2-§8.7): the pending generation's Serve
`target_capacity` grows by `maxSurgePercent` while the active one's shrinks, and the
route weight follows capacity by `stepSizePercent` every `intervalSeconds`; once the
active side is at capacity 0 and the pending side takes all traffic, the pending is
promoted. A rollback runs the same steps the other way. Each side's numbers are a
`Traffic`. Live state (route weights, Serve's target_capacity) outranks the record, so a
restart mid-upgrade neither repeats nor skips a step. Works on a `state.Pass`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from syncer.rayservice.intent import ANN_ABORT, ANN_PAUSED, Routing
from syncer.rayservice.observed import Route
from syncer.rayservice.record import (
    REASON_ABORTED,
    REASON_DEADLINE,
    REASON_SPEC_CHANGED,
    ROLLBACK,
    UPGRADE,
    Side,
)
from syncer.rayservice.routing import route_weights
from syncer.rayservice.state import Pass


@dataclass(slots=True)
class Traffic:
    """One side of an upgrade: Serve's target_capacity, its route weight, when that moved."""

    capacity: int
    weight: int
    moved_at: float | None


def incremental(p: Pass, current: str, active: str | None) -> None:
    """One pass of an incremental upgrade towards the generation git declares (`current`)."""
    routing = p.intent.routing
    assert routing is not None  # `incremental` says so
    route = p.obs.route
    live = route_weights(route, p.intent.name) if route is not None else None
    trusted = live is not None and (active is None or active in live)
    if live is not None and not trusted:
        p.event(
            "RouteOverwritten",
            f"{routing.route} lost the backend of the active generation {active}; "
            "restoring the syncer's weights (is /spec/rules ignored by the GitOps tool?)",
            "Warning",
        )
    weights = live if trusted and live is not None else {}
    if active is None:
        _first_deployment(p, current, route)
        return
    pending = _pending_candidate(p, active, weights)
    if pending is None and current == active:
        _steady(p, active, route)
        return
    if pending is None:
        pending = current
    _upgrade(p, current, active, pending, weights, route, routing)


def _first_deployment(p: Pass, current: str, route: Route | None) -> None:
    """No active generation yet (rayservice.md §8.2): deploy at capacity 100, then promote."""
    p.deploy(current, 100)
    apps = p.apps(current)
    if p.ready(current):
        p.make_active(current)
        p.active = Side(current, apps, 100, 100, p.now)
        p.event("UpdatedService", f"{current} is the active generation")
        p.clear_upgrade()
    else:
        p.pending = Side(current, apps, 100)
        p.wakes.append(p.settings.poll_s)
    p.write_route(route, [(current, 100)])


def _pending_candidate(p: Pass, active: str, weights: Mapping[str, int]) -> str | None:
    recorded = p.rec.pending.name
    if recorded == active:
        return None  # a promotion finished but its record was not written
    if recorded and (recorded in p.gens or recorded in weights):
        return recorded
    # No record: a generation that still takes traffic is an upgrade in flight.
    others = sorted((w, g) for g, w in weights.items() if g != active and w > 0)
    return others[-1][1] if others else None


def _steady(p: Pass, active: str, route: Route | None) -> None:
    p.deploy(active, 100)
    p.make_active(active)
    previous = p.rec.active
    moved = previous.name != active or previous.traffic != 100
    p.active = Side(
        active,
        p.apps(active),
        100,
        100,
        p.now if moved or previous.migrated_at is None else previous.migrated_at,
    )
    p.clear_upgrade()
    p.write_route(route, [(active, 100)])
    p.poll(active)


# --- an upgrade in flight ------------------------------------------------------------------


def _upgrade(
    p: Pass,
    current: str,
    active: str,
    pending: str,
    weights: Mapping[str, int],
    route: Route | None,
    routing: Routing,
) -> None:
    """Steps of rayservice.md §8.4-§8.7, in KubeRay's order within one pass."""
    was_rolling_back = _controls(p, current, active, pending, route)
    pending_ready = p.ready(pending)
    a, b = _traffic(p, active, pending, weights)
    before = (a.weight, b.weight)
    gate = not p.settings.require_gateway or (
        p.obs.gateway_ready and route is not None and route.accepted
    )
    active_gen, pending_gen = p.gens.get(active), p.gens.get(pending)
    active_up = active_gen is not None and active_gen.reachable
    pending_up = pending_gen is not None and pending_gen.reachable
    if p.paused:
        pass
    elif p.rollback is not None:
        _step_back(p, a, b, routing, active_up=active_up, pending_up=pending_up)
    else:
        forward = gate and pending_ready
        _step_forward(p, a, b, routing, gate=gate, forward=forward, up=(active_up, pending_up))
    if a.weight != before[0]:
        a.moved_at = p.now
    if b.weight != before[1]:
        b.moved_at = p.now
    if (a.weight, b.weight) != before:
        p.event("UpdatedHTTPRoute", f"Traffic {active}={a.weight}% {pending}={b.weight}%")
    # Serve: pending first, then active (KubeRay's order); one PUT each at most.
    p.deploy(pending, b.capacity)
    p.deploy(active, a.capacity)
    if p.rollback is None and not p.paused and a.capacity == 0 and b.weight == 100:
        # §8.6 promotion: the new generation takes the RayService-level head Service.
        p.make_active(pending)
        p.active = Side(pending, p.apps(pending), b.capacity, b.weight, b.moved_at)
        p.event("UpgradeComplete", f"{pending} is the active generation (was {active})")
        p.clear_upgrade()
        p.write_route(route, [(pending, 100)])
        return
    p.make_active(active)
    p.active = Side(active, p.apps(active), a.capacity, a.weight, a.moved_at)
    p.pending = Side(pending, p.apps(pending), b.capacity, b.weight, b.moved_at)
    settled = a.capacity == a.weight == 100 and (b.capacity == b.weight == 0 or not pending_up)
    if settled and _rolled_back(p, current, pending, route, was_rolling_back=was_rolling_back):
        return
    p.write_route(route, [(active, a.weight), (pending, b.weight)])
    p.wakes.append(p.settings.steady_poll_s if p.held else p.settings.poll_s)
    if not p.paused and (a.weight, b.weight) == before:
        reference = a.moved_at if p.rollback is not None else b.moved_at
        if reference is not None:
            p.wakes.append(max(0.0, reference + routing.interval_s - p.now))


def _controls(p: Pass, current: str, active: str, pending: str, route: Route | None) -> bool:
    """The upgrade clock, pause and abort, the deadline and why to roll back, if so.

    Returns whether the last published record was rolling back already.
    """
    rec = p.rec
    if rec.pending.name != pending:
        p.start_upgrade(pending)
    elif p.upgrade_started is None:
        p.upgrade_started = p.now
    annotations = route.annotations if route is not None else {}
    aborted = annotations.get(ANN_ABORT) == "true"
    p.paused = not aborted and (p.intent.paused or annotations.get(ANN_PAUSED) == "true")
    if current == pending and not aborted and p.failed != pending:
        p.check_deadline(pending, p.ready(pending))
    if current == active:
        p.rollback = (REASON_SPEC_CHANGED, "Goal state reverted to original cluster, rolling back.")
    elif current != pending:
        p.rollback = (
            REASON_SPEC_CHANGED,
            "Goal state changed mid-upgrade, rolling back to original cluster.",
        )
    elif aborted:
        p.rollback = (REASON_ABORTED, f"{ANN_ABORT} is set on the HTTPRoute, rolling back.")
    elif p.failed == pending:
        p.rollback = (
            REASON_DEADLINE,
            f"{pending} did not become healthy within "
            f"{p.intent.progress_deadline_s}s, rolling back.",
        )
    was_rolling_back = rec.is_true(ROLLBACK)
    upgrade = rec.condition(UPGRADE)
    was_held = (
        rec.pending.name == pending
        and upgrade is not None
        and upgrade.reason in (REASON_ABORTED, REASON_DEADLINE)
    )
    if p.rollback is not None and not was_rolling_back and not was_held:
        p.event("RollbackStarted", p.rollback[1], "Warning")
    return was_rolling_back


def _traffic(
    p: Pass, active: str, pending: str, weights: Mapping[str, int]
) -> tuple[Traffic, Traffic]:
    """Where each side stands: live capacity and weights first, the record where none."""
    rec = p.rec
    same_pending = rec.pending.name == pending
    weight = weights.get(active, 100 if not weights else 0)
    if not weights and rec.active.name == active and rec.active.traffic is not None:
        weight = rec.active.traffic  # the route was overwritten: what the syncer last wrote
    a = Traffic(
        p.capacity(active, rec.active.target_capacity, 100),
        weight,
        rec.active.migrated_at if rec.active.traffic == weight else p.now,
    )
    weight = weights.get(pending, 0) if weights else 100 - a.weight
    b = Traffic(
        p.capacity(pending, rec.pending.target_capacity if same_pending else None, 0),
        weight,
        rec.pending.migrated_at if same_pending and rec.pending.traffic == weight else p.now,
    )
    return a, b


def _due(p: Pass, side: Traffic, routing: Routing) -> bool:
    return side.moved_at is None or p.now - side.moved_at >= routing.interval_s


def _step_back(
    p: Pass, a: Traffic, b: Traffic, routing: Routing, *, active_up: bool, pending_up: bool
) -> None:
    """§8.4 rollback direction: the pending shrinks first, then the active grows."""
    if a.capacity == a.weight:
        if a.capacity + b.capacity > 100:
            # An unreachable pending cannot be asked, but it serves nothing either.
            b.capacity = max(0, b.capacity - routing.surge) if pending_up else 0
        if a.capacity + b.capacity <= 100 and active_up:
            a.capacity = min(100, a.capacity + routing.surge)
    if a.weight != a.capacity and _due(p, a, routing):
        a.weight = min(100, a.weight + routing.step, a.capacity)
        b.weight = 100 - a.weight


def _step_forward(
    p: Pass,
    a: Traffic,
    b: Traffic,
    routing: Routing,
    *,
    gate: bool,
    forward: bool,
    up: tuple[bool, bool],
) -> None:
    """§8.5: the pending grows (or, with no room, the active shrinks), then traffic follows."""
    active_up, pending_up = up
    done = a.capacity == 0 and b.capacity == 100
    if gate and not done and b.capacity == b.weight:
        if a.capacity + b.capacity <= 100:
            if pending_up:
                b.capacity = min(100, b.capacity + routing.surge)
        elif active_up:
            a.capacity = max(0, a.capacity - routing.surge)
    if b.weight != b.capacity and _due(p, b, routing) and forward:
        b.weight = min(100, b.weight + routing.step, b.capacity)
        a.weight = 100 - b.weight


def _rolled_back(
    p: Pass, current: str, pending: str, route: Route | None, *, was_rolling_back: bool
) -> bool:
    """A rollback that has settled: hold the pending at 0 % or drop it; True when done."""
    if p.rollback is None:
        return False
    if current == pending:
        # Aborted or past its deadline: git still wants it, so it is held at 0%.
        p.held = p.rollback[0]
        p.rollback = None
        if was_rolling_back:
            p.event("RollbackComplete", f"{pending} is held at 0% ({p.held})")
        return False
    active = p.active.name
    p.event("RollbackComplete", f"{active} serves all traffic again")
    p.pending = Side()
    p.rollback = None
    p.clear_upgrade()
    p.write_route(route, [(active, 100)])
    p.wakes.append(0.0)  # a third spec starts its upgrade on the next pass
    return True
