"""The actuator's decision for one cluster: what to create, delete and report. Pure.

Inputs: the checked spec, the desired set (the state ConfigMap's `data`: pod name ->
`{"group", "request"}`) and the dynamic worker Pods the actuator made for the current head.
Rules (reference/autoscaling.md §5.3, §5.4):
- a desired name must have the shape the provider invents for its group
  (`<cluster>-<group>-worker-<5 chars>`, fitted to 63), else it is ignored and reported:
  such a name can never be a git-declared Pod's;
- desired and absent: create, with the lowest free replica index of the group, while the
  group holds fewer than `max` Pods (the cap) and the head lives;
- present and not desired: delete; a desired Pod is never deleted, even above `max`
  (Ray lowers it through the desired set);
- a dead Pod (Failed, Succeeded, its container ended) is reported; the provider removes
  its name, after which it is deleted like any Pod no longer desired;
- a cluster a finished RayJob released (stop mode: `kuberay.io/shutdown-requested` on its
  Pods) gets no new workers, and its released Pods stay, like its rendered ones.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from syncer.autoscaler.spec import ClusterSpec

NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"  # KubeRay's generateName characters
_RANDOM: Final = 5
SEED_REQUEST: Final = "seed"


def worker_prefix(cluster: str, group: str) -> str:
    """`<cluster>-<group>-worker-`, fitted to 63 with the suffix as the provider does."""
    prefix = f"{cluster}-{group}"[:50].lower()
    return prefix[: 63 - len("-worker-") - _RANDOM].rstrip("-.") + "-worker-"


def new_name(cluster: str, group: str, rng: random.Random) -> str:
    """A fresh dynamic worker name (the provider draws its own the same way)."""
    return worker_prefix(cluster, group) + "".join(rng.choice(NAME_ALPHABET) for _ in range(5))


def is_dynamic_name(name: str, cluster: str, group: str) -> bool:
    """Whether `name` has the provider's shape for this cluster and group."""
    pattern = re.escape(worker_prefix(cluster, group)) + f"[{NAME_ALPHABET}]{{{_RANDOM}}}"
    return re.fullmatch(pattern, name) is not None


def seed(spec: ClusterSpec, rng: random.Random) -> dict[str, str]:
    """The first desired set: max(replicas, min) names per group (within max)."""
    entry = {}
    for group in spec.groups.values():
        names: set[str] = set()
        while len(names) < group.seed:
            names.add(new_name(spec.cluster, group.name, rng))
        value = json.dumps({"group": group.name, "request": SEED_REQUEST}, sort_keys=True)
        entry.update(dict.fromkeys(sorted(names), value))
    return entry


@dataclass(frozen=True, slots=True)
class Worker:
    """One dynamic worker Pod the actuator made for the current head, as cached."""

    name: str
    group: str
    index: int | None
    dead: bool = False
    ready: bool = False
    deleting: bool = False
    released: bool = False  # shut down by a finished RayJob: kept, as its rendered Pods are


@dataclass(frozen=True, slots=True)
class Create:
    """Create the worker `name` of `group` with replica index `index`."""

    name: str
    group: str
    index: int


@dataclass(frozen=True, slots=True)
class GroupCount:
    """A group's numbers for `kuberay status`: desired names, Pods, Ready Pods, the cap."""

    desired: int
    pods: int
    ready: int
    max: int


@dataclass(frozen=True, slots=True)
class Plan:
    """What one pass does."""

    create: tuple[Create, ...] = ()
    delete: tuple[str, ...] = ()
    dead: tuple[str, ...] = ()
    capped: tuple[str, ...] = ()  # desired names not created: the group is at max
    ignored: tuple[str, ...] = ()  # desired entries refused (bad name, unknown group)
    more: bool = False  # creations left for the next pass (the per-pass limit)
    counts: Mapping[str, GroupCount] = field(default_factory=dict)


def desired_set(data: Mapping[str, str], spec: ClusterSpec) -> tuple[dict[str, str], list[str]]:
    """(name -> group, refused names) from the state ConfigMap's data."""
    desired: dict[str, str] = {}
    refused: list[str] = []
    for name, text in sorted(data.items()):
        try:
            entry = json.loads(text)
        except (ValueError, TypeError, RecursionError):
            entry = None
        group = entry.get("group") if isinstance(entry, dict) else None
        if (
            not isinstance(group, str)
            or group not in spec.groups
            or not is_dynamic_name(name, spec.cluster, group)
        ):
            refused.append(name)
            continue
        desired[name] = group
    return desired, refused


def _lowest_free(used: set[int]) -> int:
    index = 0
    while index in used:
        index += 1
    return index


def decide(
    spec: ClusterSpec,
    desired: Mapping[str, str],
    workers: Iterable[Worker],
    *,
    head_alive: bool,
    limit: int = 100,
    refused: Iterable[str] = (),
) -> Plan:
    """The plan for one pass; at most `limit` creations (`more` says when some wait)."""
    existing = {w.name: w for w in workers}
    delete = tuple(
        sorted(
            name
            for name, w in existing.items()
            if name not in desired and not w.deleting and not w.released
        )
    )
    dead = tuple(sorted(name for name, w in existing.items() if w.dead and not w.deleting))
    create: list[Create] = []
    capped: list[str] = []
    counts: dict[str, GroupCount] = {}
    more = False
    for group in spec.groups.values():
        mine = [w for w in existing.values() if w.group == group.name]
        used = {w.index for w in mine if w.index is not None}
        holding = sum(1 for w in mine if w.name in desired)
        wanted = sorted(n for n, g in desired.items() if g == group.name and n not in existing)
        for name in wanted:
            if holding >= group.max:
                capped.append(name)
                continue
            if not head_alive:
                continue
            if len(create) >= limit:
                more = True
                continue
            index = _lowest_free(used)
            used.add(index)
            holding += 1
            create.append(Create(name, group.name, index))
        counts[group.name] = GroupCount(
            desired=sum(1 for g in desired.values() if g == group.name),
            pods=sum(1 for w in mine if not w.deleting),
            ready=sum(1 for w in mine if w.ready and not w.deleting),
            max=group.max,
        )
    return Plan(
        create=tuple(create),
        delete=delete,
        dead=dead,
        capped=tuple(capped),
        ignored=tuple(sorted(refused)),
        more=more,
        counts=counts,
    )
