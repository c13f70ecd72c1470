"""The syncer benchmark at a tiny scale, and the engine behaviours its figures rest on.

`python -m bench syncer` is run by hand (its 10,000-job run takes minutes); this runs the
same code with five jobs and checks that every figure is produced, without asserting
any timing. The unit tests below pin what the engine does so that thousands of jobs
stay cheap: events overtake due polls, a watch event is never answered with an older
dashboard answer, and a write's own echo triggers no pass.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench.syncer import Scale, kuberay_model, report, run_syncer
from syncer.cli import Options, Syncer
from syncer.kube.forwarding import ForwardingKube
from syncer.kube.informer import same_content
from syncer.kube.workqueue import WorkQueue
from syncer.ray.pool import DashboardPool
from syncer.rayjob import machine as rayjob
from syncer.rayjob.reconciler import POLL_SHARE
from tests.syncer.fakedashboard import FakeDashboard, JobPlan, ManualClock


def test_the_benchmark_produces_every_figure_for_five_jobs() -> None:
    run = run_syncer(Scale(jobs=5, lead_s=1.0, spread_s=2.0), quiet=True)
    ours = run.syncer
    assert ours.missing == 0
    assert len(ours.delays) == 5
    assert all(delay >= 0 for delay in ours.delays)  # nothing is published before Ray ends
    assert ours.dashboard_requests > 0
    assert ours.kube_requests > 0
    assert ours.job_hours > 0
    assert ours.cpu_s is not None and ours.cpu_s > 0
    assert ours.peak_dashboard_rps is not None
    assert run.rss_base_mb > 0
    assert run.syncer_rss_mb >= run.rss_base_mb
    assert run.request_cost_s > 0
    assert run.server.get("kubelet_ends") == 5
    assert [model.name for model in run.models] == [
        "kuberay model",
        "kuberay model + Job events",
        "kuberay model + Job events, no client limit",
    ]
    for model in run.models:
        assert model.missing == 0
        assert len(model.delays) == 5
    text = "\n".join(report(run))
    for figure in (
        "delay p50",
        "delay p95",
        "dashboard req / job-hour",
        "kubernetes req / job-hour",
        "peak RSS",
        "CPU, cores",
        "targets: p95 <= 1 s",
    ):
        assert figure in text


def test_kuberay_model_sweeps_one_job_at_a_time() -> None:
    # 100 jobs at 0.1 s a request: a sweep takes 10 s, longer than the 3 s requeue, so a
    # job waits for its turn in the sweep (and a job that ended costs a second request,
    # the status update, then a third, the RayCluster delete, on a pass of its own); with
    # the Job's watch event it is queued at its end, behind whatever is queued then.
    t0 = 1_000.0
    ends = {f"job{i}": t0 + 20 + i * 0.05 for i in range(100)}
    plain = kuberay_model(ends, t0, 0.1, events=False)
    assert plain.missing == 0
    assert max(plain.delays) <= 100 * 0.3 + 0.1 + 1e-6  # at worst a sweep of ended jobs
    assert plain.percentile(0.5) > 1.0
    assert plain.dashboard_requests >= 100 * 2  # every job asked at least twice in 20 s
    assert plain.kube_writes == 3 * 100  # status update, RayCluster delete, its Event
    renewals = round(8 * plain.window_s / 450)  # its eight informers' watches
    assert plain.kube_requests == plain.kube_writes + renewals
    quick = kuberay_model({"a": t0 + 10}, t0, 0.001, events=True)
    assert quick.delays[0] <= 0.003
    assert math.isclose(quick.percentile(0.95), quick.delays[0])


def test_kuberay_model_waits_for_its_client_limit_in_a_burst() -> None:
    # 1,000 jobs end within 1 s at 0.1 ms a request: without a client limit every status
    # is out within a second; with KubeRay's (100/s, burst 200 for RayJob status updates,
    # another bucket for RayCluster deletes) the 800 after the burst take >= 8 s from the
    # first end, so the last job, which ended 1 s after the first, waits >= 7 s.
    t0 = 1_000.0
    ends = {f"job{i:04d}": t0 + 10 + i * 0.001 for i in range(1000)}
    free = kuberay_model(ends, t0, 0.0001, events=True, client_limit=False)
    limited = kuberay_model(ends, t0, 0.0001, events=True)
    assert free.missing == limited.missing == 0
    assert free.percentile(1.0) < 1.0
    assert limited.percentile(1.0) >= (1000 - 200) / 100 - 1
    assert limited.percentile(1.0) <= (1000 - 200) / 100 * 2 + 1  # both buckets drain together
    # Complete goes out first for the jobs that ended first: the order is the FIFO's.
    first = sorted(limited.series)[:200]
    assert max(delay for _, delay in first) < 1.0
    assert limited.kube_writes == free.kube_writes == 3 * 1000


def test_kuberay_model_publishes_complete_only_once_the_submitter_finished() -> None:
    # Ray's job ends at t0 + 10, its submitter Job is Complete 5 s later (a slow Job
    # controller): KubeRay writes Ray's end (jobStatus) on the pass that sees it, and
    # Complete on the Job's event, 5 s after Ray's end, one write more than otherwise.
    t0 = 1_000.0
    ends = {"a": t0 + 10.0, "b": t0 + 10.0}
    late = kuberay_model(ends, t0, 0.001, events=True, submitters={"a": t0 + 15.0})
    assert late.missing == 0
    by_end = dict(zip(ends, late.delays, strict=True))
    assert 5.0 <= by_end["a"] <= 5.01
    assert by_end["b"] <= 0.01  # no submitter time given: as before
    assert late.kube_writes == 3 + 1 + 3


def test_events_are_handed_out_before_due_timers() -> None:
    clock = ManualClock(0.0)
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    for key in ("poll-1", "poll-2", "poll-3"):
        queue.add_after(key, 1.0)
    clock.advance(2.0)
    queue.add("event")
    queue.add_after("batched", 0.5, urgent=True)
    clock.advance(1.0)
    queue.add("poll-2")  # an event for a key whose poll is already due: it moves up
    order: list[str] = []
    while (taken := queue.get(0)) is not None:
        order.append(taken)
        queue.done(taken)
    assert order == ["event", "poll-2", "batched", "poll-1", "poll-3"]
    assert queue.ready() == 0


def test_a_key_added_while_active_is_processed_once_more() -> None:
    queue: WorkQueue[str] = WorkQueue(clock=ManualClock(0.0))
    queue.add("a")
    assert queue.get(0) == "a"
    queue.add("a")
    queue.add("a")
    assert queue.get(0) is None  # not while it is being worked on
    queue.done("a")
    assert queue.get(0) == "a"
    queue.done("a")
    assert queue.get(0) is None


def test_a_dashboard_answer_older_than_the_event_is_not_reused() -> None:
    clock = ManualClock(100.0)
    dashboard = FakeDashboard(clock, job_plan=JobPlan(pending_s=0.0, running_s=None))
    dashboard.submit_job("job-1", "python x.py")
    pool = DashboardPool(lambda url: dashboard, budget_rps=1000.0, clock=clock)
    first = pool.facts("http://head:8265")
    assert first.jobs["job-1"]["status"] == "RUNNING"
    clock.advance(0.1)
    assert pool.facts("http://head:8265") is first  # young enough, shared
    assert pool.facts("http://head:8265", since=clock() - 0.2) is first
    event = clock()
    assert pool.facts("http://head:8265", since=event) is not first  # asked again
    assert dashboard.calls["list_jobs"] == 2


def test_a_change_only_of_the_resource_version_is_no_change() -> None:
    before = {"kind": "Job", "metadata": {"name": "a", "resourceVersion": "1"}, "status": {}}
    echo = {"kind": "Job", "metadata": {"name": "a", "resourceVersion": "2"}, "status": {}}
    changed = {"kind": "Job", "metadata": {"name": "a", "resourceVersion": "3"}, "status": {"x": 1}}
    assert same_content(before, echo)
    assert not same_content(before, changed)
    assert not same_content(before, {**echo, "metadata": {"name": "b", "resourceVersion": "1"}})


def test_polls_share_the_dashboard_budget_between_running_jobs() -> None:
    jobs = Syncer(
        kube=None,  # type: ignore[arg-type]  # never called: no informer is started
        options=Options(namespaces=("ns",), dashboard_budget_rps=200.0, poll_interval_s=3.0),
        dashboards=lambda url: FakeDashboard(),
    ).rayjob
    assert jobs.poll_interval() == 3.0
    with jobs._lock:
        for index in range(10_000):
            jobs._set_state_locked(("RayJob", "ns", f"j{index}"), rayjob.RUNNING)
    assert math.isclose(jobs.poll_interval(), 10_000 / (200.0 * POLL_SHARE))
    settings = jobs.settings()
    assert 0.8 * 100.0 <= settings.poll_interval_s <= 1.2 * 100.0
    assert (
        settings.submitter_finished_timeout_s == jobs.options.settings.submitter_finished_timeout_s
    )
    with jobs._lock:
        jobs._set_state_locked(("RayJob", "ns", "j0"), rayjob.COMPLETE)
        jobs._set_state_locked(("RayJob", "ns", "j1"), None)
    assert math.isclose(jobs.poll_interval(), 9_998 / (200.0 * POLL_SHARE))


def test_guarded_kube_lists_page_by_page_for_informers() -> None:
    from syncer.kube.client import PODS
    from syncer.kube.leader import AlwaysLeader, GuardedKube

    class Paged(ForwardingKube):
        def list_pages(self, resource, namespace, *, label_selector=None, limit=100):
            yield [{"metadata": {"name": "a"}}], "7"
            yield [{"metadata": {"name": "b"}}], "7"

    pages = list(GuardedKube(Paged(None), AlwaysLeader()).list_pages(PODS, "ns"))  # type: ignore[arg-type]
    assert [[o["metadata"]["name"] for o in page] for page, _ in pages] == [["a"], ["b"]]


def test_a_restart_looks_at_the_oldest_published_status_first() -> None:
    from renderer import naming
    from syncer.engine import Engine
    from syncer.engine import Options as EngineOptions

    class Keys:
        kind = "RayJob"

        def caches(self) -> list[object]:
            return []

        def reconcile(self, key: object) -> None:
            return None

    engine = Engine(None, EngineOptions(namespaces=("ns",)))  # type: ignore[arg-type]  # no I/O here
    engine.register(Keys())  # type: ignore[arg-type]  # the protocol's three members
    versions = {"young": "900", "old": "12", "middle": "450", "new": None}
    for name, version in versions.items():
        labels = {naming.ORIGIN_KIND: "RayJob", naming.ORIGIN_NAME: name}
        engine.intents.upsert(
            {"metadata": {"name": f"{name}-intent", "namespace": "ns", "labels": labels}}
        )
        if version is not None:
            engine.statuses.upsert(
                {
                    "metadata": {
                        "name": naming.status_configmap_name(name),
                        "namespace": "ns",
                        "resourceVersion": version,
                    }
                }
            )
    engine.drain()
    engine.enqueue_all()
    order = []
    while (key := engine.queue.get(0)) is not None:
        order.append(key[2])
        engine.queue.done(key)
    assert order == ["new", "old", "middle", "young"]


def test_the_events_of_one_pass_are_recorded_as_one() -> None:
    from syncer.rayjob.reconciler import _one_event

    complete = rayjob.Event("Normal", "Complete", "RayJob complete: SUCCEEDED")
    release = rayjob.Event("Normal", "DeleteCluster", "DeleteCluster: releasing 1 pod(s)")
    assert _one_event([]) is None
    assert _one_event([complete]) is complete
    merged = _one_event([complete, release])
    assert merged == rayjob.Event(
        "Normal", "Complete", "RayJob complete: SUCCEEDED; DeleteCluster: releasing 1 pod(s)"
    )
    warned = _one_event([release, rayjob.Event("Warning", "Failed", "RayJob failed")])
    assert warned is not None and (warned.type, warned.reason) == ("Warning", "DeleteCluster")


def test_the_delay_plot_is_a_valid_png(tmp_path: Path) -> None:
    import struct
    import zlib

    from bench import png

    path = png.scatter(
        tmp_path / "plot.png", [([(60.0, 0.5), (90.0, 2.0)], (220, 40, 40))], width=120, height=80
    )
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (120, 80)
    idat = data.index(b"IDAT")
    (length,) = struct.unpack(">I", data[idat - 4 : idat])
    rows = zlib.decompress(data[idat + 4 : idat + 4 + length])
    assert len(rows) == height * (1 + 3 * width)
    assert bytes((220, 40, 40)) in rows  # the points are drawn


def test_the_queue_tells_a_poll_from_an_event() -> None:
    clock = ManualClock(0.0)
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("polled", 1.0)
    queue.add("evented")
    queue.add_after("batched", 1.0, urgent=True)
    clock.advance(2.0)
    handed = [queue.get(0) for _ in range(3)]
    assert handed == ["evented", "batched", "polled"]
    assert [queue.timed(k) for k in ("evented", "batched", "polled")] == [False, False, True]
    queue.done("polled")
    assert not queue.timed("polled")


def test_a_cached_status_map_keeps_its_record_packed_and_readable() -> None:
    from syncer import status

    record = {"status": {"jobDeploymentStatus": "Running", "message": "x" * 400}}
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))  # as `publish` writes
    cm = {
        "metadata": {"name": "a-kuberay-status", "namespace": "ns", "resourceVersion": "7"},
        "data": {status.STATUS_KEY: text, "jobDeploymentStatus": "Running", "jobStatus": "RUNNING"},
    }
    slim = status.slim_status(cm)
    assert isinstance(slim["data"][status.STATUS_KEY], bytes)
    assert len(slim["data"][status.STATUS_KEY]) < len(text)
    assert slim["data"]["jobDeploymentStatus"] == "Running"  # read by the healing
    assert "jobStatus" not in slim["data"]  # written each time, never read back
    assert status.read_record(slim, dict) == record
    assert status.read_record(status.slim_status(slim), dict) == record  # projected again
