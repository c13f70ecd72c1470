"""The Prometheus registry: values, label handling, thread safety and the text format."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from syncer import metrics
from syncer.metrics import Counter, Gauge, Histogram, Registry, format_value


def test_counter_renders_help_type_and_sorted_series() -> None:
    registry = Registry()
    requests = registry.register(Counter("x_requests_total", "Requests.", ["verb", "code"]))
    requests.labels("GET", "500").inc()
    requests.labels(verb="GET", code="200").inc(2)
    requests.labels(code="200", verb="DELETE").inc()
    assert registry.render() == (
        "# HELP x_requests_total Requests.\n"
        "# TYPE x_requests_total counter\n"
        'x_requests_total{code="200",verb="DELETE"} 1\n'
        'x_requests_total{code="200",verb="GET"} 2\n'
        'x_requests_total{code="500",verb="GET"} 1\n'
    )
    assert requests.labels("GET", "200").value == 2.0


def test_label_values_and_help_are_escaped() -> None:
    registry = Registry()
    gauge = registry.register(Gauge("x_info", 'Back\\slash and\nnewline "kept".', ["v"]))
    gauge.labels(v='a"b\\c\nd').set(1)
    assert registry.render().splitlines() == [
        '# HELP x_info Back\\\\slash and\\nnewline "kept".',
        "# TYPE x_info gauge",
        'x_info{v="a\\"b\\\\c\\nd"} 1',
    ]


def test_unlabelled_families_show_zero_and_empty_ones_only_their_header() -> None:
    registry = Registry()
    registry.register(Gauge("b_depth", "Depth."))
    registry.register(Counter("a_total", "A.", ["kind"]))
    assert registry.render() == (
        "# HELP a_total A.\n# TYPE a_total counter\n"
        "# HELP b_depth Depth.\n# TYPE b_depth gauge\nb_depth 0\n"
    )


def test_gauge_set_inc_dec() -> None:
    gauge = Gauge("g", "G.")
    gauge.set(5)
    gauge.inc(2.5)
    gauge.dec()
    assert gauge.labels().value == 6.5


def test_set_state_keeps_one_series_per_object() -> None:
    state = Gauge("state", "S.", ["namespace", "name", "status"])
    state.set_state("status", "Running", namespace="a", name="j")
    state.set_state("status", "Running", namespace="a", name="k")
    state.set_state("status", "Complete", namespace="a", name="j")
    assert state.render().splitlines()[2:] == [
        'state{name="j",namespace="a",status="Complete"} 1',
        'state{name="k",namespace="a",status="Running"} 1',
    ]
    with pytest.raises(ValueError, match="has labels"):
        state.set_state("status", "x", namespace="a")


def test_remove_and_remove_matching_drop_series() -> None:
    gauge = Gauge("g", "G.", ["namespace", "cluster"])
    for cluster in ("c1", "c2"):
        gauge.labels("a", cluster).set(1)
        gauge.labels("b", cluster).set(1)
    assert gauge.remove("a", "c1") is True
    assert gauge.remove("a", "c1") is False
    assert gauge.remove_matching(namespace="b") == 2
    assert [line.split(" ")[0] for line in gauge.samples()] == ['g{cluster="c2",namespace="a"}']
    gauge.clear()
    assert list(gauge.samples()) == []
    with pytest.raises(ValueError, match="no label"):
        gauge.remove_matching(nope="x")


def test_histogram_buckets_are_cumulative_with_inf_sum_and_count() -> None:
    registry = Registry()
    seconds = registry.register(Histogram("h_seconds", "H.", ["kind"], buckets=[0.5, 1, 10]))
    for value in (0.1, 0.5, 0.7, 3, 11):
        seconds.labels(kind="RayJob").observe(value)
    assert registry.render().splitlines() == [
        "# HELP h_seconds H.",
        "# TYPE h_seconds histogram",
        'h_seconds_bucket{kind="RayJob",le="0.5"} 2',
        'h_seconds_bucket{kind="RayJob",le="1"} 3',
        'h_seconds_bucket{kind="RayJob",le="10"} 4',
        'h_seconds_bucket{kind="RayJob",le="+Inf"} 5',
        'h_seconds_sum{kind="RayJob"} 15.3',
        'h_seconds_count{kind="RayJob"} 5',
    ]
    child = seconds.labels(kind="RayJob")
    assert (child.count, child.sum) == (5, 15.3)


def test_unlabelled_histogram_observe() -> None:
    histogram = Histogram("h", "H.", buckets=[1])
    histogram.observe(2)
    assert list(histogram.samples()) == [
        'h_bucket{le="1"} 0',
        'h_bucket{le="+Inf"} 1',
        "h_sum 2",
        "h_count 1",
    ]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Counter("bad name", "x"), "invalid metric name"),
        (lambda: Counter("c", "x", ["bad-label"]), "invalid label name"),
        (lambda: Counter("c", "x", ["__reserved"]), "invalid label name"),
        (lambda: Counter("c", "x", ["a", "a"]), "duplicate label names"),
        (lambda: Histogram("h", "x", ["le"]), "reserved"),
        (lambda: Histogram("h", "x", buckets=[2, 1]), "increase strictly"),
        (lambda: Histogram("h", "x", buckets=[1, 1]), "increase strictly"),
    ],
)
def test_bad_definitions_are_refused(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_bad_label_use_is_refused() -> None:
    counter = Counter("c_total", "C.", ["a", "b"])
    with pytest.raises(ValueError, match="has labels"):
        counter.labels("only-one")
    with pytest.raises(ValueError, match="has labels"):
        counter.labels(a="1", c="2")
    with pytest.raises(ValueError, match="not both"):
        counter.labels("1", b="2")
    with pytest.raises(ValueError, match=r"use \.labels"):
        counter.inc()
    with pytest.raises(ValueError, match="cannot decrease"):
        counter.labels("1", "2").inc(-1)


def test_a_name_registers_once() -> None:
    registry = Registry()
    registry.register(Counter("c_total", "C."))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Gauge("c_total", "C."))
    assert registry.get("c_total").type == "counter"


def test_concurrent_increments_are_all_counted() -> None:
    counter = Counter("c_total", "C.", ["worker"])
    histogram = Histogram("h", "H.", buckets=[1])

    def work(worker: int) -> None:
        for _ in range(5_000):
            counter.labels(worker=str(worker % 2)).inc()
            histogram.observe(0.5)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert counter.labels(worker="0").value + counter.labels(worker="1").value == 40_000
    assert histogram.labels().count == 40_000


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (0.25, "0.25"),
        (-3.0, "-3"),
        (1e20, "1e+20"),
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
        (float("nan"), "NaN"),
    ],
)
def test_values_are_written_the_way_prometheus_clients_write_them(value: float, text: str) -> None:
    assert format_value(value) == text


def test_the_syncer_families_parse_with_the_reference_parser() -> None:
    parser = pytest.importorskip("prometheus_client.parser")
    registry = Registry()
    for family in (metrics.TRANSITIONS, metrics.RECONCILE_SECONDS, metrics.LEADER):
        registry.register(family)
    metrics.TRANSITIONS.labels("ml", "RayJob", "Running", "Complete").inc()
    metrics.RECONCILE_SECONDS.labels(kind="RayJob").observe(0.2)
    parsed = {f.name: f for f in parser.text_string_to_metric_families(registry.render())}
    assert parsed["kuberay_syncer_transitions"].type == "counter"
    sample = next(
        # The families are the process's own: other tests' passes may have written them too.
        s
        for s in parsed["kuberay_syncer_transitions"].samples
        if s.labels["from"] == "Running" and s.labels.get("namespace") == "ml"
    )
    assert sample.labels == {
        "namespace": "ml",
        "kind": "RayJob",
        "from": "Running",
        "to": "Complete",
    }
    assert parsed["kuberay_syncer_reconcile_seconds"].type == "histogram"
    assert parsed["kuberay_syncer_leader"].type == "gauge"


def test_the_global_registry_holds_the_syncer_and_kuberay_families() -> None:
    expected = {
        "kuberay_syncer_job_state": ("gauge", ("namespace", "name", "job_deployment_status")),
        "kuberay_syncer_transitions_total": ("counter", ("namespace", "kind", "from", "to")),
        "kuberay_syncer_api_requests_total": ("counter", ("target", "verb", "code")),
        "kuberay_syncer_reconcile_seconds": ("histogram", ("kind",)),
        "kuberay_syncer_queue_depth": ("gauge", ()),
        "kuberay_syncer_leader": ("gauge", ()),
        "kuberay_syncer_service_target_capacity": ("gauge", ("namespace", "name", "cluster")),
        "kuberay_syncer_service_traffic_routed_percent": (
            "gauge",
            ("namespace", "name", "cluster"),
        ),
        # KubeRay v1.7's own names, types and labels (rayjob.md Appendix B).
        "kuberay_job_execution_duration_seconds": (
            "gauge",
            ("name", "namespace", "uid", "job_deployment_status", "retry_count"),
        ),
        "kuberay_job_info": ("gauge", ("name", "namespace", "uid")),
        "kuberay_job_deployment_status": (
            "gauge",
            ("name", "namespace", "uid", "deployment_status"),
        ),
    }
    for name, (kind, labels) in expected.items():
        family = metrics.REGISTRY.get(name)
        assert (family.type, family.labelnames) == (kind, labels), name
    text = metrics.REGISTRY.render()
    assert text.index("# HELP kuberay_job_info") < text.index("# HELP kuberay_syncer_leader")


def test_state_gauges_show_each_object_of_their_source_once() -> None:
    registry = Registry()
    states = metrics.ObjectStates()
    info = registry.register(
        metrics.StateGauge("x_info", "Info.", ["name", "uid"], states, lambda ns, n, u, s: (n, u))
    )
    registry.register(
        metrics.StateGauge(
            "x_state",
            "State.",
            ["namespace", "name", "state"],
            states,
            lambda ns, n, u, s: (ns, n, s),
        )
    )
    states.set("b", "job", "u-2", "Running")
    states.set("a", "job", "u-1", "New")
    states.set("a", "job", "u-1", "Complete")  # a move replaces the series, as KubeRay's
    assert registry.render() == (
        "# HELP x_info Info.\n# TYPE x_info gauge\n"
        'x_info{name="job",uid="u-1"} 1\n'
        'x_info{name="job",uid="u-2"} 1\n'
        "# HELP x_state State.\n# TYPE x_state gauge\n"
        'x_state{name="job",namespace="a",state="Complete"} 1\n'
        'x_state{name="job",namespace="b",state="Running"} 1\n'
    )
    assert states.remove("b", "job") and not states.remove("b", "job")
    assert 'namespace="b"' not in registry.render()
    with pytest.raises(TypeError, match="ObjectStates"):
        info.labels("job", "u-1")
    info.clear()
    assert registry.render().count("} 1") == 0


def test_the_rayjob_families_cost_a_fraction_of_labelled_children() -> None:
    import tracemalloc

    names = [f"job-{i:05d}" for i in range(2_000)]
    uids = [f"{i:08d}-0000-4000-8000-000000000000" for i in range(2_000)]

    def traced(fill: Callable[[], object]) -> int:
        tracemalloc.start()
        try:
            kept = fill()
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert kept is not None
        return size

    def children() -> object:
        families = [Gauge(f"x{i}", "X.", ["namespace", "name", "uid", "s"]) for i in range(3)]
        for name, uid in zip(names, uids, strict=True):
            for family in families:
                family.labels("ns", name, uid, "Running").set(1)
        return families

    def states() -> object:
        source = metrics.ObjectStates()
        for name, uid in zip(names, uids, strict=True):
            source.set("ns", name, uid, "Running")
        return source

    assert traced(states) < 0.4 * traced(children)


def test_a_hostile_name_in_a_state_gauge_cannot_add_a_sample_line() -> None:
    registry = Registry()
    states = metrics.ObjectStates()
    registry.register(
        metrics.StateGauge("x_info", "Info.", ["name", "uid"], states, lambda ns, n, u, s: (n, u))
    )
    states.set("ns", 'a"} 1\nx_info{name="forged', "u\\1", "Running")
    samples = [line for line in registry.render().splitlines() if not line.startswith("#")]
    assert samples == ['x_info{name="a\\"} 1\\nx_info{name=\\"forged",uid="u\\\\1"} 1']


def test_a_state_gauge_shows_no_series_for_an_object_it_has_nothing_to_say_of() -> None:
    # kuberay_cluster_condition_provisioned before the condition is known: info only.
    registry = Registry()
    states = metrics.ObjectStates(fields=3)
    for name, make in (
        ("x_info", lambda ns, n, uid, owner, cond: (n, uid, owner)),
        ("x_condition", lambda ns, n, uid, owner, cond: (n, uid, cond) if cond else None),
    ):
        registry.register(metrics.StateGauge(name, "X.", ["name", "uid", "v"], states, make))
    states.set("ns", "c1", "u-1", "RayJob", "")
    states.set("ns", "c2", "u-2", "RayCluster", "True")
    samples = [line for line in registry.render().splitlines() if not line.startswith("#")]
    assert samples == [
        'x_condition{name="c2",uid="u-2",v="True"} 1',
        'x_info{name="c1",uid="u-1",v="RayJob"} 1',
        'x_info{name="c2",uid="u-2",v="RayCluster"} 1',
    ]
    assert states.get("ns", "c1") == ("u-1", "RayJob", "")
    with pytest.raises(ValueError, match="3 facts"):
        states.set("ns", "c3", "u-3", "RayJob")  # one fact short: refused, nothing kept
    assert states.get("ns", "c3") is None
