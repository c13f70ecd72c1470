"""The two switching strategies: `None` (one generation at a time) and `NewCluster` (blue/green).

Traffic moves by the `ray.io/serve-active` label only: the RayService Services select one
generation's pods. With NewCluster the new generation waits as pending until its Serve
applications are RUNNING (and the upgrade is neither paused nor past its deadline), then
takes all traffic at once (rayservice.md §7). Pure; works on a `state.Pass`.
"""

from __future__ import annotations

from syncer.rayservice.intent import NONE
from syncer.rayservice.record import REASON_DEADLINE, Side
from syncer.rayservice.state import Pass


def switch(p: Pass, current: str, active: str | None) -> None:
    """One pass of a switching strategy towards the generation git declares (`current`)."""
    if p.intent.strategy == NONE:
        # One generation at a time: labels gate traffic (ray.io/serve follows readiness).
        p.deploy(current, None)
        _serve_from(p, current)
        return
    if active is not None and active != current and active in p.gens:
        _upgrade_new_cluster(p, current, active)
        return
    p.deploy(current, None)
    if active == current:
        _serve_from(p, current)  # pods re-created by the GitOps tool get the label back
        return
    # First deployment: the generation waits as pending until its apps are RUNNING.
    if p.ready(current):
        p.make_active(current)
        p.active = Side(current, p.apps(current))
        p.event("UpdatedService", f"The serve Services now select {current}")
        p.clear_upgrade()
    else:
        p.pending = Side(current, p.apps(current))
        p.wakes.append(p.settings.poll_s)


def _serve_from(p: Pass, current: str) -> None:
    """`current` is, and stays, the active generation."""
    p.make_active(current)
    p.active = Side(current, p.apps(current))
    p.clear_upgrade()
    p.poll(current)


def _upgrade_new_cluster(p: Pass, current: str, active: str) -> None:
    """Blue/green (rayservice.md §7): switch once the new generation is ready."""
    p.start_upgrade(current)
    p.deploy(active, None)  # only if its head restarted and lost the apps
    p.deploy(current, None)
    p.paused = p.intent.paused
    ready = p.ready(current)
    p.check_deadline(current, ready)
    active_apps = p.apps(active)
    apps = p.apps(current)
    if ready and not p.paused and p.failed != current:
        p.make_active(current)
        p.active = Side(current, apps)
        p.event("UpdatedService", f"The serve Services now select {current} (was {active})")
        p.clear_upgrade()
        return
    p.make_active(active)
    p.active = Side(active, active_apps)
    p.pending = Side(current, apps)
    if p.failed == current:
        p.held = REASON_DEADLINE
    p.wakes.append(p.settings.poll_s)
