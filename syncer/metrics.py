"""A small thread-safe Prometheus registry and the syncer's metric families.

`Counter`, `Gauge` and `Histogram` with label names; `Registry.render()` writes the text
exposition format 0.0.4. No I/O here (`httpserver` serves it) and no dependency. The
families are module constants registered on `REGISTRY`; the KubeRay-named ones keep
KubeRay v1.7's names, types and labels so existing dashboards keep working.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, Generic, Literal, TypeVar

MetricType = Literal["counter", "gauge", "histogram"]
LabelValues = tuple[str, ...]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_METRIC_NAME: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME: Final = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def format_value(value: float) -> str:
    """A sample value as Prometheus clients write it: `1`, `0.25`, `+Inf`, `NaN`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels_text(pairs: Iterable[tuple[str, str]]) -> str:
    body = ",".join(f'{name}="{_escape_label(value)}"' for name, value in pairs)
    return f"{{{body}}}" if body else ""


class _Child:
    """One series (one label set) of a counter or gauge."""

    __slots__ = ("_lock", "_value")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._value = 0.0

    @property
    def value(self) -> float:
        """The current value."""
        with self._lock:
            return self._value


class CounterChild(_Child):
    """One series of a counter: it only goes up."""

    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        """Add `amount` (at least 0)."""
        if amount < 0:
            raise ValueError(f"a counter cannot decrease (inc by {amount})")
        with self._lock:
            self._value += amount


class GaugeChild(_Child):
    """One series of a gauge."""

    __slots__ = ()

    def set(self, value: float) -> None:
        """Set the value."""
        with self._lock:
            self._value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        """Add `amount`."""
        with self._lock:
            self._value += amount

    def dec(self, amount: float = 1.0) -> None:
        """Subtract `amount`."""
        with self._lock:
            self._value -= amount


class HistogramChild:
    """One series of a histogram: a count per bucket, a sum and a total count."""

    __slots__ = ("_bounds", "_count", "_counts", "_lock", "_sum")

    def __init__(self, lock: threading.Lock, bounds: tuple[float, ...]) -> None:
        self._lock = lock
        self._bounds = bounds
        self._counts = [0] * len(bounds)
        self._sum = 0.0
        self._count = 0

    def observe(self, value: float) -> None:
        """Record one observation."""
        with self._lock:
            for index, bound in enumerate(self._bounds):
                if value <= bound:
                    self._counts[index] += 1
                    break
            self._sum += value
            self._count += 1

    @property
    def count(self) -> int:
        """How many observations were made."""
        with self._lock:
            return self._count

    @property
    def sum(self) -> float:
        """The sum of all observations."""
        with self._lock:
            return self._sum

    def cumulative(self) -> list[tuple[float, int]]:
        """`(upper bound, observations <= bound)` for every bucket, `+Inf` last."""
        with self._lock:
            counts = list(self._counts)
            total = self._count
        result, running = [], 0
        for bound, count in zip(self._bounds, counts, strict=True):
            running += count
            result.append((bound, running))
        result.append((math.inf, total))
        return result


C = TypeVar("C", CounterChild, GaugeChild, HistogramChild)


class _Family(Generic[C]):
    """A named metric with label names; one child per label set."""

    type: MetricType

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        if not _METRIC_NAME.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} for {name}")
        if len(set(labelnames)) != len(labelnames):
            raise ValueError(f"duplicate label names for {name}: {list(labelnames)}")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._children: dict[LabelValues, C] = {}

    def _new_child(self) -> C:
        raise NotImplementedError

    def _key(self, values: Sequence[object], kv: dict[str, object]) -> LabelValues:
        if values and kv:
            raise ValueError("give label values by position or by name, not both")
        if kv:
            if set(kv) != set(self.labelnames):
                raise ValueError(
                    f"{self.name} has labels {list(self.labelnames)}, got {sorted(kv)}"
                )
            return tuple(str(kv[name]) for name in self.labelnames)
        if len(values) != len(self.labelnames):
            raise ValueError(
                f"{self.name} has labels {list(self.labelnames)}, got {len(values)} value(s)"
            )
        return tuple(str(value) for value in values)

    def labels(self, *values: object, **kv: object) -> C:
        """The series for one label set, by position or by name (created at first use).

        Label names that are Python keywords (`from`) go by position or `**{"from": x}`.
        """
        key = self._key(values, kv)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._new_child()
            return child

    def remove(self, *values: object, **kv: object) -> bool:
        """Drop the series of one label set; whether it existed."""
        key = self._key(values, kv)
        with self._lock:
            return self._children.pop(key, None) is not None

    def remove_matching(self, **kv: object) -> int:
        """Drop every series whose labels include all of `kv`; how many were dropped."""
        unknown = set(kv) - set(self.labelnames)
        if unknown:
            raise ValueError(f"{self.name} has no label(s) {sorted(unknown)}")
        wanted = [(self.labelnames.index(name), str(value)) for name, value in kv.items()]
        with self._lock:
            doomed = [k for k in self._children if all(k[i] == v for i, v in wanted)]
            for key in doomed:
                del self._children[key]
        return len(doomed)

    def clear(self) -> None:
        """Drop every series."""
        with self._lock:
            self._children.clear()

    def _unlabelled(self) -> C:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels {list(self.labelnames)}: use .labels()")
        return self.labels()

    def _series(self) -> list[tuple[LabelValues, C]]:
        with self._lock:
            if not self.labelnames and () not in self._children:
                self._children[()] = self._new_child()
            return sorted(self._children.items())

    def samples(self) -> Iterator[str]:
        """The sample lines of this family, label sets sorted."""
        for values, child in self._series():
            pairs = sorted(zip(self.labelnames, values, strict=True))
            yield from self._child_samples(pairs, child)

    def _child_samples(self, pairs: list[tuple[str, str]], child: C) -> Iterator[str]:
        raise NotImplementedError

    def render(self) -> str:
        """HELP, TYPE and every sample, each line ending in a newline."""
        lines = [
            f"# HELP {self.name} {_escape_help(self.documentation)}",
            f"# TYPE {self.name} {self.type}",
            *self.samples(),
        ]
        return "".join(f"{line}\n" for line in lines)


S = TypeVar("S", CounterChild, GaugeChild)


class _ScalarFamily(_Family[S]):
    """A family whose series each hold one value."""

    def _child_samples(self, pairs: list[tuple[str, str]], child: S) -> Iterator[str]:
        yield f"{self.name}{_labels_text(pairs)} {format_value(child.value)}"


class Counter(_ScalarFamily[CounterChild]):
    """A value that only goes up (by convention named `*_total`)."""

    type = "counter"

    def _new_child(self) -> CounterChild:
        return CounterChild(self._lock)

    def inc(self, amount: float = 1.0) -> None:
        """Add to an unlabelled counter."""
        self._unlabelled().inc(amount)


class Gauge(_ScalarFamily[GaugeChild]):
    """A value that goes up and down."""

    type = "gauge"

    def _new_child(self) -> GaugeChild:
        return GaugeChild(self._lock)

    def set(self, value: float) -> None:
        """Set an unlabelled gauge."""
        self._unlabelled().set(value)

    def inc(self, amount: float = 1.0) -> None:
        """Add to an unlabelled gauge."""
        self._unlabelled().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        """Subtract from an unlabelled gauge."""
        self._unlabelled().dec(amount)

    def set_state(self, state_label: str, state: str, **labels: object) -> None:
        """Make the series with `state_label=state` read 1 and drop its siblings' series.

        For "one state at a time" gauges such as `kuberay_syncer_job_state`: `labels`
        name every other label of the family.
        """
        if set(labels) | {state_label} != set(self.labelnames) or state_label in labels:
            raise ValueError(f"{self.name} has labels {list(self.labelnames)}")
        self.remove_matching(**labels)
        self.labels(**labels, **{state_label: state}).set(1)


class Histogram(_Family[HistogramChild]):
    """Observations counted into cumulative buckets, with their sum and count."""

    type = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        if "le" in labelnames:
            raise ValueError(f'"le" is reserved for histogram buckets ({name})')
        bounds = tuple(float(b) for b in buckets if not math.isinf(b))
        if not bounds or list(bounds) != sorted(set(bounds)):
            raise ValueError(f"histogram buckets must increase strictly ({name})")
        super().__init__(name, documentation, labelnames)
        self.buckets = bounds

    def _new_child(self) -> HistogramChild:
        return HistogramChild(self._lock, self.buckets)

    def observe(self, value: float) -> None:
        """Record an observation on an unlabelled histogram."""
        self._unlabelled().observe(value)

    def _child_samples(self, pairs: list[tuple[str, str]], child: HistogramChild) -> Iterator[str]:
        for bound, count in child.cumulative():
            labels = _labels_text([*pairs, ("le", format_value(bound))])
            yield f"{self.name}_bucket{labels} {count}"
        yield f"{self.name}_sum{_labels_text(pairs)} {format_value(child.sum)}"
        yield f"{self.name}_count{_labels_text(pairs)} {child.count}"


class ObjectStates:
    """A few facts per tracked object by (namespace, name), which gauges read at scrape time.

    KubeRay shows a RayJob's facts as three series (info, state, deployment status), a
    RayCluster's as two (info, provisioned condition). Kept as labelled children they cost
    ~250 bytes a series (a child, a label tuple, a dict slot each); ten thousand objects
    keep one entry each here instead: their uid, then the facts the gauges show.
    """

    def __init__(self, fields: int = 2) -> None:
        self.fields = fields  # how many strings each object has (uid included)
        self._lock = threading.Lock()
        self._states: dict[tuple[str, str], tuple[str, ...]] = {}

    def set(self, namespace: str, name: str, *facts: str) -> None:
        """Record one object's facts (uid first), replacing what was recorded."""
        if len(facts) != self.fields:
            raise ValueError(f"expected {self.fields} facts, got {len(facts)}")
        with self._lock:
            self._states[(namespace, name)] = facts

    def get(self, namespace: str, name: str) -> tuple[str, ...] | None:
        """One object's facts, or None."""
        with self._lock:
            return self._states.get((namespace, name))

    def remove(self, namespace: str, name: str) -> bool:
        """Forget one object; whether it was there."""
        with self._lock:
            return self._states.pop((namespace, name), None) is not None

    def clear(self) -> None:
        """Forget every object."""
        with self._lock:
            self._states.clear()

    def items(self) -> list[tuple[tuple[str, str], tuple[str, ...]]]:
        """A copy of ((namespace, name), facts) pairs."""
        with self._lock:
            return list(self._states.items())


# (namespace, name, *facts) -> label values, or None: that object has no series here.
StateLabels = Callable[..., LabelValues | None]


class StateGauge(Gauge):
    """A gauge with at most one series per object of an `ObjectStates`, each reading 1.

    Read-only: `values` makes an object's label values, in `labelnames` order, or says
    it has none (a condition not yet known).
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        source: ObjectStates,
        values: StateLabels,
    ) -> None:
        super().__init__(name, documentation, labelnames)
        self._source = source
        self._values = values
        self._one = GaugeChild(self._lock)
        self._one.set(1)

    def labels(self, *values: object, **kv: object) -> GaugeChild:
        """Refused: the series are the source's objects (set them there)."""
        raise TypeError(f"{self.name} is read from its ObjectStates: set the state there")

    def remove(self, *values: object, **kv: object) -> bool:
        """Refused, as `labels`."""
        raise TypeError(f"{self.name} is read from its ObjectStates: remove the object there")

    def remove_matching(self, **kv: object) -> int:
        """Refused, as `labels` (it would find no series of its own and drop nothing)."""
        raise TypeError(f"{self.name} is read from its ObjectStates: remove the object there")

    def clear(self) -> None:
        """Forget every object of the source (and so every series of its gauges)."""
        self._source.clear()

    def _series(self) -> list[tuple[LabelValues, GaugeChild]]:
        make, one = self._values, self._one
        made = (make(ns, name, *facts) for (ns, name), facts in self._source.items())
        return sorted((values, one) for values in made if values is not None)


F = TypeVar("F", bound="Counter | Gauge | Histogram")


class Registry:
    """A set of metric families with unique names, rendered in name order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, Counter | Gauge | Histogram] = {}

    def register(self, family: F) -> F:
        """Add `family` and return it; a second family with the same name is an error."""
        with self._lock:
            if family.name in self._families:
                raise ValueError(f"metric {family.name} is already registered")
            self._families[family.name] = family
        return family

    def get(self, name: str) -> Counter | Gauge | Histogram:
        """The family named `name` (KeyError when there is none)."""
        with self._lock:
            return self._families[name]

    def render(self) -> str:
        """Every family in the text exposition format 0.0.4."""
        with self._lock:
            families = sorted(self._families.items())
        return "".join(family.render() for _, family in families)


REGISTRY: Final = Registry()

# --- the syncer's own families --------------------------------------------------------------

BUILD_INFO: Final = REGISTRY.register(
    Gauge("kuberay_syncer_build_info", "Always 1; the version of the running syncer.", ["version"])
)
# Every tracked RayJob's uid and jobDeploymentStatus ("New" before the first), which
# kuberay_syncer_job_state, kuberay_job_info and kuberay_job_deployment_status show.
JOB_STATES: Final = ObjectStates()
JOB_STATE: Final = REGISTRY.register(
    StateGauge(
        "kuberay_syncer_job_state",
        "1 for the current jobDeploymentStatus of each tracked RayJob.",
        ["namespace", "name", "job_deployment_status"],
        JOB_STATES,
        lambda ns, name, uid, state: (ns, name, state),
    )
)
TRANSITIONS: Final = REGISTRY.register(
    Counter(
        "kuberay_syncer_transitions_total",
        "State transitions made by the syncer, by kind (RayJob, RayService, RayCluster).",
        ["namespace", "kind", "from", "to"],
    )
)
API_REQUESTS: Final = REGISTRY.register(
    Counter(
        "kuberay_syncer_api_requests_total",
        "Requests to the Kubernetes API (target=kube) and Ray dashboards (target=dashboard); "
        "code is the HTTP status, error when none came back, or any (dashboard calls).",
        ["target", "verb", "code"],
    )
)
RECONCILE_SECONDS: Final = REGISTRY.register(
    Histogram(
        "kuberay_syncer_reconcile_seconds",
        "Time spent reconciling one tracked object.",
        ["kind"],
    )
)
RECONCILE_ERRORS: Final = REGISTRY.register(
    Counter(
        "kuberay_syncer_reconcile_errors_total",
        "Reconcile passes that ended in an error, by kind and error class "
        "(transient or permanent).",
        ["kind", "error"],
    )
)
QUEUE_DEPTH: Final = REGISTRY.register(
    Gauge("kuberay_syncer_queue_depth", "Objects waiting in the work queue.")
)
TRACKED_OBJECTS: Final = REGISTRY.register(
    Gauge(
        "kuberay_syncer_tracked_objects",
        "Objects the syncer currently tracks, by kind.",
        ["kind"],
    )
)
LEADER: Final = REGISTRY.register(
    Gauge("kuberay_syncer_leader", "1 while this replica holds the leader Lease, else 0.")
)
CONFIG_RELOADS: Final = REGISTRY.register(
    Counter(
        "kuberay_syncer_config_reloads_total",
        "Config file reloads, by result (applied, rejected).",
        ["result"],
    )
)
SERVICE_TARGET_CAPACITY: Final = REGISTRY.register(
    Gauge(
        "kuberay_syncer_service_target_capacity",
        "Serve target_capacity (percent) last pushed to each cluster generation of a "
        "RayService during an incremental upgrade.",
        ["namespace", "name", "cluster"],
    )
)
SERVICE_TRAFFIC_PERCENT: Final = REGISTRY.register(
    Gauge(
        "kuberay_syncer_service_traffic_routed_percent",
        "HTTPRoute weight (percent) of each cluster generation of a RayService.",
        ["namespace", "name", "cluster"],
    )
)

# --- KubeRay v1.7's families (rayjob.md Appendix B, rayservice.md §10) ----------------------
# `uid` is the uid of the object that anchors the RayJob/RayService here (its intent
# ConfigMap), since no custom resource exists.

JOB_INFO: Final = REGISTRY.register(
    StateGauge(
        "kuberay_job_info",
        "Metadata of RayJobs.",
        ["name", "namespace", "uid"],
        JOB_STATES,
        lambda ns, name, uid, state: (name, ns, uid),
    )
)
JOB_DEPLOYMENT_STATUS: Final = REGISTRY.register(
    StateGauge(
        "kuberay_job_deployment_status",
        "The RayJob's current deployment status.",
        ["name", "namespace", "uid", "deployment_status"],
        JOB_STATES,
        lambda ns, name, uid, state: (name, ns, uid, state),
    )
)
# A gauge in KubeRay (set, not observed into buckets): the last duration per label set.
JOB_EXECUTION_DURATION: Final = REGISTRY.register(
    Gauge(
        "kuberay_job_execution_duration_seconds",
        "Seconds from the RayJob's start to its move to Complete, Failed or Retrying.",
        ["name", "namespace", "uid", "job_deployment_status", "retry_count"],
    )
)
# Its distribution, which a last-value gauge cannot show.
JOB_EXECUTION_SECONDS: Final = REGISTRY.register(
    Histogram(
        "kuberay_syncer_job_execution_seconds",
        "Seconds from a RayJob's start to its move to Complete, Failed or Retrying.",
        ["namespace", "job_deployment_status"],
        buckets=(30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400),
    )
)
SERVICE_INFO: Final = REGISTRY.register(
    Gauge("kuberay_service_info", "Metadata of RayServices.", ["name", "namespace", "uid"])
)
SERVICE_CONDITION_READY: Final = REGISTRY.register(
    Gauge(
        "kuberay_service_condition_ready",
        "Whether the RayService is ready (condition true or false).",
        ["name", "namespace", "uid", "condition"],
    )
)
SERVICE_CONDITION_UPGRADE: Final = REGISTRY.register(
    Gauge(
        "kuberay_service_condition_upgrade_in_progress",
        "Whether the RayService is upgrading (condition true or false).",
        ["name", "namespace", "uid", "condition"],
    )
)
# RayCluster (raycluster.md §7): `uid` is the head Service's (the head Pod's without one),
# which anchors the status here. Each tracked cluster's uid, owner kind and
# RayClusterProvisioned condition status ("" until known), which kuberay_cluster_info and
# kuberay_cluster_condition_provisioned show.
CLUSTER_STATES: Final = ObjectStates(fields=3)
CLUSTER_INFO: Final = REGISTRY.register(
    StateGauge(
        "kuberay_cluster_info",
        "Metadata of RayClusters (owner_kind: RayCluster, RayJob or RayService).",
        ["name", "namespace", "uid", "owner_kind"],
        CLUSTER_STATES,
        lambda ns, name, uid, owner, provisioned: (name, ns, uid, owner),
    )
)
CLUSTER_CONDITION_PROVISIONED: Final = REGISTRY.register(
    StateGauge(
        "kuberay_cluster_condition_provisioned",
        "Whether the RayCluster is provisioned (condition true or false).",
        ["name", "namespace", "uid", "condition"],
        CLUSTER_STATES,
        lambda ns, name, uid, owner, provisioned: (
            (name, ns, uid, provisioned) if provisioned else None
        ),
    )
)
CLUSTER_PROVISIONED_DURATION: Final = REGISTRY.register(
    Gauge(
        "kuberay_cluster_provisioned_duration_seconds",
        "Seconds from the RayCluster's creation (its earliest Pod's) to all its Pods ready.",
        ["name", "namespace", "uid"],
    )
)
POD_RECOVERIES: Final = REGISTRY.register(
    Counter(
        "kuberay_syncer_pod_recoveries_total",
        "Dead rendered Pods the syncer deleted so that GitOps self-heal re-creates them, "
        "by node type (head, worker) and result (deleted, failed, backoff).",
        ["namespace", "node_type", "result"],
    )
)
EVENTS_HELD: Final = REGISTRY.register(
    Counter(
        "kuberay_syncer_events_held_total",
        "Events that found no spare write token: queued to be sent later, or dropped when "
        "10,000 were waiting already (status writes go first).",
        ["result"],
    )
)
CLUSTER_STATUS_WRITES: Final = REGISTRY.register(
    Counter(
        "kuberay_syncer_cluster_status_writes_total",
        "RayCluster status ConfigMap writes, and changes held back by the debounce window.",
        ["result"],
    )
)
