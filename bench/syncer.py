"""The syncer with N active RayJobs against the fake API server, beside a model of KubeRay.

Not a timed test: `python -m bench syncer` runs 100 then 10,000 RayJobs (each on its own
one-pod cluster, K8sJobMode; each scale in a fresh process), `python -m bench syncer
--jobs 100` one scale (`--spread`, `--lead`, `--budget`, `--verbose`; `--real`: on a real
control plane, `bench.realcp`). It prints, for the
syncer and for KubeRay's model run on the same end times:

- the delay from a Ray job's end to the published Complete status (p50, p95, max);
- dashboard and Kubernetes API requests (and writes) per job-hour;
- the syncer's peak RSS and CPU (mean, and the busiest 10 s), its peak dashboard rate
  (the most requests in any sliding 1-s window, from each request's time);
- the restart: the syncer starts among the running jobs, and the warm-up is timed until
  every job had a pass (against the floor jobs / budget), with the rank correlation of
  that order with the jobs' ages (1: oldest first) and any status write that moved a job
  back;
- issue 13's targets met or missed, one `syncer-summary key=value ...` line a script can
  split, and with `--plot FILE` a PNG of each job's delay over its end time.

The syncer's API writes go through the daemon's write limiter (`api_write_qps`, default
200/s with a burst of 400; `--api-write-qps 0` for none), as the daemon runs them: statuses
take tokens in turn, Events and pod releases only spare ones (`leader.GuardedKube`), so a
burst of ends waits for the limit in its Events and releases. Requests are counted until
those are done too, and the report says how long after the last status that was, and how
many Events were recorded or dropped. The KubeRay models wait for KubeRay's own client
limit (100 requests/s, burst 200, one bucket per kind written); a third model without it
is printed beside them for comparison, and the targets are checked against the first two.

Profiles of the window, by file paths in the environment: `KUBERAY_BENCH_PROFILE_SERVER`
(cProfile of the fake server's event loop), `KUBERAY_BENCH_SAMPLE_SERVER` and
`KUBERAY_BENCH_SAMPLE_SYNCER` (stack samples of every thread, `bench.sampler`).

How it is set up:

- The fake API server runs in a subprocess (`python -m bench.syncer --serve`), so its
  memory and CPU are not the syncer's. It is populated through its store: the first job's
  objects go through the store's create and status-patch code (the intent ConfigMap of a
  RayJob rendered by the renderer; its two head Services, the cluster's and the RayJob's;
  the head Pod, Running and Ready; the submitter Job and its Pod, already ungated and
  Running), the others are clones under their own names and UIDs. Each job also has the
  status ConfigMap the syncer publishes for a job it saw Running (written oldest job
  first, each with its own start time), so the run starts as a syncer (re)starting among
  10,000 running jobs. A previous syncer (`prime`, its own
  process, no write limit) then runs until it has published every cluster's status map and
  head-Pod annotation, and stops: what the measured syncer restarts on is what its
  predecessor left.
- The syncer runs in this process and talks REST to the server, configured as in a Pod
  (`syncer.kube.incluster`: a token file, no `kubernetes` import). Each cluster has its own
  `FakeDashboard` on the real clock, its job RUNNING. After the warm-up (lists, then one
  pass of every job), each Ray job gets an end time spread over the window; at that moment
  a "kubelet" in the server process marks the submitter Pod Succeeded and its Job Complete
  (as `ray job logs --follow` returns and the Job controller reacts), writing through the
  store's patch code (watchers get the same events a REST PATCH makes) so the fake
  server's capacity is left to the syncer. That is the event the syncer reacts to.
- Delay = when the syncer's write of the Complete status returned, minus the job's end.
- Requests are counted over the window (from the end of the warm-up to the last Complete
  published) and divided by the jobs' running time inside it. RSS is VmHWM less what the
  simulated dashboards took; the interpreter and imports are reported on their own.
- KubeRay's model (one `GetJobInfo` per RayJob per reconcile, requeue after 3 s, one
  reconcile at a time) is a discrete-event simulation on a simulated clock, not slept
  through: each reconcile costs the median latency of a real loopback HTTP GET measured in
  this run; finishing a job costs a second round trip (the status update) and a third
  on the pass its own update triggers (the RayCluster delete), and counts KubeRay's three
  writes (status, RayCluster delete, its Event; its reads come from informer caches,
  whose eight watches it renews every 450 s on average, as client-go's reflector does).
  Each write first waits for a token of its kind's bucket (KubeRay v1.7's `--qps 100
  --burst 200`, per REST client). It is simulated on requeues only, and with the watch
  event of the submitter Job completing (KubeRay owns the Job, so that event queues the
  RayJob at once, behind any keys already queued); and once more with that event and no
  client limit. It has no CPU or memory figures.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import gc
import heapq
import json
import logging
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from bench import png, sampler
from bench.sampler import Sampler
from renderer import naming
from syncer import memory
from syncer.cli import Options, Syncer
from syncer.config import Config
from syncer.kube.client import MERGE_PATCH, Kube, KubeClient, Resource
from syncer.kube.forwarding import ForwardingKube
from syncer.kube.incluster import ServiceAccount
from syncer.kube.leader import AlwaysLeader, GuardedKube
from syncer.kube.ratelimit import TokenBucket
from syncer.kube.transport import Connections
from syncer.ray.types import RayFacts
from syncer.rayjob import machine as rayjob
from syncer.rayjob import views
from syncer.rayjob.intent import parse_job_intent
from syncer.status import ROLE_STATUS, STATUS_KEY, SYNCER_MANAGER
from tests.syncer.fakedashboard import FakeDashboard, JobPlan

if TYPE_CHECKING:
    from tests.fakeapi.store import Store

Manifest = dict[str, Any]

NAMESPACE = "bench"
TEMPLATE = "benchjob"
SCALES = (100, 10_000)
REPO = Path(__file__).resolve().parents[1]
RAYJOB = f"""
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: {TEMPLATE}
spec:
  entrypoint: python -c "import time; time.sleep(60)"
  submissionMode: K8sJobMode
  shutdownAfterJobFinishes: true
  ttlSecondsAfterFinished: 0
  rayClusterSpec:
    rayVersion: "2.52.0"
    headGroupSpec:
      template:
        spec:
          containers:
          - name: ray-head
            image: rayproject/ray:2.52.0
"""
KUBERAY_REQUEUE_S = 3.0
# Writes KubeRay makes when a job ends with shutdownAfterJobFinishes and TTL 0: the status
# update, then (on the pass its own status event triggers) the RayCluster delete and its
# DeletedRayCluster event. Reads come from its informer caches.
KUBERAY_FINISH_WRITES = 3
# KubeRay v1.7's client limit (`--qps`, `--burst`; ray-operator/apis/config/v1alpha1/
# defaults.go: DefaultQPS 100, DefaultBurst 200), set on the manager's rest.Config.
# controller-runtime makes one REST client per kind, each with its own token bucket from
# that config: RayJob status updates take from one, RayCluster deletes from another, and
# Events go through the recorder's own client, asynchronously.
KUBERAY_CLIENT_QPS = 100.0
KUBERAY_CLIENT_BURST = 200
# Its manager's informers watch eight kinds (RayCluster, RayJob, RayService; Pod, Service,
# Secret, PVC and Job, which its controllers own), and client-go's reflector asks each watch
# to end after a random 5-10 min: a new watch request per kind every 450 s on average.
KUBERAY_WATCHED_KINDS = 8
KUBERAY_WATCH_RENEWAL_S = 450.0
FINISHED = (rayjob.COMPLETE, rayjob.FAILED)
# Profiling the window, by file paths in the environment: the fake server's event loop
# (cProfile) and its threads (samples), and the syncer's threads (samples).
PROFILE_SERVER = "KUBERAY_BENCH_PROFILE_SERVER"
SAMPLE_SERVER = "KUBERAY_BENCH_SAMPLE_SERVER"
SAMPLE_SYNCER = "KUBERAY_BENCH_SAMPLE_SYNCER"


@dataclass(frozen=True)
class Scale:
    """One run's shape: how many jobs, and when they end after the warm-up (seconds)."""

    jobs: int
    lead_s: float
    spread_s: float
    budget_rps: float = 200.0
    workers: int = 8
    seed: int = 1
    # The daemon's API write limiter (`api_write_qps`/`api_write_burst`); 0: none.
    write_qps: float = 0.0
    write_burst: int = 0

    @classmethod
    def default(cls, jobs: int, budget_rps: float = 200.0) -> Scale:
        """Ends over ~10 s at 100 jobs (10 a second); at 10,000 jobs from 60 s on, over
        300 s (33 a second: each end costs the fake API server ~7 writes at ~1.2 ms of
        its CPU, so 60 s, 167 a second, would need more than this machine's 2 cores for
        the fake server alone and measure it rather than the syncer; see `--spread`)."""
        if jobs >= 2000:
            return cls(jobs, 60.0, 300.0, budget_rps)
        return cls(jobs, 2.0, 10.0, budget_rps)


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of `values` (nearest rank; NaN when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


@dataclass
class Figures:
    """What one side (the syncer, or a model of KubeRay) measured."""

    name: str
    delays: list[float]
    missing: int
    dashboard_requests: int
    kube_requests: int
    kube_writes: int
    job_hours: float
    window_s: float
    peak_dashboard_rps: float | None = None
    cpu_s: float | None = None
    peak_cores: float | None = None
    notes: dict[str, str] = field(default_factory=dict)
    # (seconds from the window's start to the job's end, its delay), by end time.
    series: list[tuple[float, float]] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        """The q-quantile of the delays (missing jobs count as infinitely late)."""
        return quantile([*self.delays, *[math.inf] * self.missing], q)

    @property
    def dashboard_per_job_hour(self) -> float:
        """Dashboard requests per job-hour."""
        return self.dashboard_requests / self.job_hours if self.job_hours else math.nan

    @property
    def kube_per_job_hour(self) -> float:
        """Kubernetes API requests per job-hour."""
        return self.kube_requests / self.job_hours if self.job_hours else math.nan

    @property
    def writes_per_job_hour(self) -> float:
        """Kubernetes API writes per job-hour."""
        return self.kube_writes / self.job_hours if self.job_hours else math.nan

    @property
    def cores(self) -> float | None:
        """Mean CPU use over the window, in cores."""
        return None if self.cpu_s is None else self.cpu_s / max(self.window_s, 1e-9)


@dataclass
class Run:
    """One scale's results: the syncer, the models, and what the set-up measured."""

    scale: Scale
    syncer: Figures
    models: list[Figures]
    request_cost_s: float
    warmup_s: float
    restart: Restart
    populate_s: float
    rss_base_mb: float
    rss_dashboards_mb: float
    rss_increase_mb: float
    server: Manifest
    load: tuple[float, float]  # the machine's 1-minute load average before and after
    tail_s: float = 0.0  # after the last status, until the Events and releases were done
    events_dropped: int = 0  # Events the write budget's queue had no room for (whole run)
    complete_events: int = 0  # the RayJobs' Complete Events that were recorded
    # At the end of the warm-up (lists and a pass of every job), as `syncer_rss_mb` counts:
    # the RSS then, and the peak until then (the lists' pages included).
    rss_warm_mb: tuple[float, float] = (math.nan, math.nan)

    @property
    def syncer_rss_mb(self) -> float:
        """The syncer's peak RSS: the interpreter with its imports plus what it grew by."""
        return self.rss_base_mb + self.rss_increase_mb


# --- the objects of one job --------------------------------------------------------------------


def job_name(index: int) -> str:
    """The name of the index-th RayJob."""
    return f"rj{index:05d}"


def template_objects() -> dict[str, Manifest]:
    """The rendered objects of the template RayJob by kind: its intent ConfigMap, head Pod,
    submitter Job, and its two head Services (`Service`: the cluster's; `Service/job`: the
    RayJob's own, as KubeRay makes it), all of which the syncer caches."""
    from tests.syncer.harness import render  # the renderer is only needed by the server

    wanted: dict[str, Manifest] = {}
    for obj in render(RAYJOB, NAMESPACE):
        kind = str(obj["kind"])
        if kind == "Service" and obj["metadata"]["name"] == naming.head_service_name(TEMPLATE):
            kind = "Service/job"
        wanted[kind] = obj
    assert set(wanted) == {"ConfigMap", "Pod", "Job", "Service", "Service/job"}, sorted(wanted)
    return wanted


def clone(template: Manifest, name: str) -> Manifest:
    """The template object for another RayJob name (every derived name follows it)."""
    cloned: Manifest = json.loads(json.dumps(template).replace(TEMPLATE, name))
    return cloned


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _running_pod_status(pod: Manifest, stamp: str) -> Manifest:
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    ]
    conditions.append(
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": stamp,
        }
    )
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": "127.0.0.1",
        "podIP": "127.0.0.1",
        "startTime": stamp,
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": stamp}},
            }
            for c in pod["spec"]["containers"]
        ],
    }


def _succeeded_pod_status(pod: Manifest, stamp: str) -> Manifest:
    status = _running_pod_status(pod, stamp)
    status["phase"] = "Succeeded"
    for condition in status["conditions"]:
        if condition["type"] in ("Ready", "ContainersReady"):
            condition["status"] = "False"
            condition["reason"] = "PodCompleted"
    for container in status["containerStatuses"]:
        container.update(
            ready=False,
            started=False,
            state={
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": stamp,
                    "finishedAt": stamp,
                }
            },
        )
    return status


def _complete_job_status(stamp: str) -> Manifest:
    message = "Reached expected number of succeeded pods"
    return {
        "active": None,
        "ready": 0,
        "succeeded": 1,
        "completionTime": stamp,
        "conditions": [
            {
                "type": kind,
                "status": "True",
                "reason": "CompletionsReached",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": stamp,
            }
            for kind in ("SuccessCriteriaMet", "Complete")
        ],
    }


def populate(store: Store, jobs: int, seed: int, started: float) -> dict[str, str]:
    """Create every job's objects in the store; returns submitter pod names by job name.

    The first job goes through the store's create and status-patch code (defaults,
    managedFields, status); the others are its stored objects cloned under their own
    names and UIDs (`Store.put`), which is much faster and keeps the shape exact. Each job
    also gets the status ConfigMap the syncer publishes for a job seen Running at
    `started` (its Job carries no status annotations: a running job's Job shows the
    health they would give it), so a syncer that starts on them has nothing to write for
    the RayJobs until something changes.
    """
    from tests.fakeapi.kinds import kind_for_resource  # server side only

    rng = random.Random(seed)
    templates = template_objects()
    stamp = _stamp(started)
    store.create(
        kind_for_resource("namespaces"),
        None,
        {"metadata": {"name": NAMESPACE}},
        field_manager="bench",
    )
    configmaps, pods, batch = (kind_for_resource(r) for r in ("configmaps", "pods", "jobs.batch"))
    first = job_name(0)
    cm = store.create(
        configmaps, NAMESPACE, clone(templates["ConfigMap"], first), field_manager="bench"
    )
    services = [
        store.create(
            kind_for_resource("services"),
            NAMESPACE,
            clone(templates[kind], first),
            field_manager="bench",
        )
        for kind in ("Service", "Service/job")
    ]
    head = store.create(pods, NAMESPACE, clone(templates["Pod"], first), field_manager="bench")
    head, _ = store.patch(
        pods,
        NAMESPACE,
        head["metadata"]["name"],
        MERGE_PATCH,
        {"status": _running_pod_status(head, stamp)},
        subresource="status",
        field_manager="kubelet",
    )
    job = store.create(batch, NAMESPACE, clone(templates["Job"], first), field_manager="bench")
    pod = store.create(
        pods, NAMESPACE, _submitter_pod(job, rng), field_manager="kube-controller-manager"
    )
    pod, _ = store.patch(
        pods,
        NAMESPACE,
        pod["metadata"]["name"],
        MERGE_PATCH,
        {"status": _running_pod_status(pod, stamp)},
        subresource="status",
        field_manager="kubelet",
    )
    job, _ = store.patch(
        batch,
        NAMESPACE,
        first,
        MERGE_PATCH,
        {"status": {"active": 1, "ready": 1, "startTime": stamp}},
        subresource="status",
        field_manager="kube-controller-manager",
    )
    status = _status_configmap(cm, head, job, pod, started)
    texts = [json.dumps(obj) for obj in (cm, head, job, pod, *services)]
    status_text = json.dumps(status)
    job_uid = str(job["metadata"]["uid"])
    submitters = {first: str(pod["metadata"]["name"])}
    uids = {first: job_uid}
    for index in range(1, jobs):
        name = job_name(index)
        uid = uids[name] = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        for text in texts:
            obj = json.loads(text.replace(first, name).replace(job_uid, uid))
            meta = obj["metadata"]
            if meta["uid"] != uid:
                del meta["uid"]  # a fresh one
            store.put(obj)
        submitters[name] = str(pod["metadata"]["name"]).replace(first, name)
    # Each job started a while ago (its own age), and its status was written when it did:
    # oldest first, as in a cluster where they started one after another.
    for name in sorted(uids, key=lambda n: -job_age_s(n, seed)):
        text = status_text.replace(first, name).replace(job_uid, uids[name])
        store.put(json.loads(text.replace(repr(started), repr(started - job_age_s(name, seed)))))
    return submitters


def job_age_s(name: str, seed: int) -> float:
    """How long before the benchmark's start the named job started (up to 50 min)."""
    return random.Random(f"{seed}:{name}").random() * 3000.0


def _status_configmap(
    cm: Manifest, head: Manifest, job: Manifest, pod: Manifest, started: float
) -> Manifest:
    """The status ConfigMap the syncer publishes for this job seen Running at `started`
    (the same state machine, and the body `syncer.status.publish` writes)."""
    intent = parse_job_intent(cm)
    dashboard = FakeDashboard(lambda: started, job_plan=JobPlan(pending_s=0.0, running_s=None))
    dashboard.submit_job(str(intent.submission_id), intent.entrypoint)
    facts = RayFacts(
        reachable=True, jobs={str(j["submission_id"]): dict(j) for j in dashboard.list_jobs()}
    )
    observation = rayjob.Observation(
        intent,
        None,
        (views.pod_view(views.project_pod(head)),),
        views.submitter_view(views.project_job(job), [views.project_pod(pod)]),
        facts,
        started,
    )
    record = rayjob.decide(observation).record
    assert record.job_deployment_status == rayjob.RUNNING, record
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": naming.status_configmap_name(intent.name),
            "namespace": intent.namespace,
            "labels": {
                naming.MANAGED_BY: SYNCER_MANAGER,
                naming.ORIGIN_KIND: "RayJob",
                naming.ORIGIN_NAME: intent.name,
                naming.ROLE: ROLE_STATUS,
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job["metadata"]["name"],
                    "uid": job["metadata"]["uid"],
                }
            ],
        },
        "data": {
            STATUS_KEY: json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")),
            "jobDeploymentStatus": record.job_deployment_status,
            "jobStatus": record.job_status,
        },
    }


def _submitter_pod(job: Manifest, rng: random.Random) -> Manifest:
    """The Pod the Job controller would make, already ungated by the syncer."""
    meta = job["metadata"]
    template = json.loads(json.dumps(job["spec"]["template"]))
    spec = template["spec"]
    spec.pop("schedulingGates", None)
    suffix = "".join(rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{suffix}",
            "namespace": meta["namespace"],
            "labels": dict(template["metadata"]["labels"]),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


# --- the server process ------------------------------------------------------------------------


class EndKubelet:
    """Ends submitters at given times: the pod Succeeded, then its Job Complete."""

    def __init__(
        self,
        store: Store,
        submitters: dict[str, str],
        on_loop: Callable[[Callable[[], None]], None],
    ) -> None:
        from tests.fakeapi.kinds import kind_for_resource  # server side only

        self._on_loop = on_loop
        self._store = store
        self._pods = kind_for_resource("pods")
        self._jobs = kind_for_resource("jobs.batch")
        self._submitters = submitters
        self.lags: list[float] = []
        self.errors = 0

    def start(self, ends: dict[str, float]) -> None:
        """End each job's submitter at its time (absolute Unix times)."""
        threading.Thread(target=self._run, args=(ends,), daemon=True).start()

    def _run(self, ends: dict[str, float]) -> None:
        for name, end in sorted(ends.items(), key=lambda item: item[1]):
            delay = end - time.time()
            if delay > 0:
                time.sleep(delay)
            # On the server's event loop: a second thread writing to the store would hold
            # the GIL while the loop waits for it after every socket send (a convoy that
            # made each response wait up to the 5 ms switch interval).
            self._on_loop(functools.partial(self._end, name, end))

    def _end(self, name: str, end: float) -> None:
        container = {"spec": {"containers": [{"name": "ray-job-submitter"}]}}
        stamp = _stamp(end)
        try:
            self._store.patch(
                self._pods,
                NAMESPACE,
                self._submitters[name],
                MERGE_PATCH,
                {"status": _succeeded_pod_status(container, stamp)},
                subresource="status",
                field_manager="kubelet",
            )
            self._store.patch(
                self._jobs,
                NAMESPACE,
                name,
                MERGE_PATCH,
                {"status": _complete_job_status(stamp)},
                subresource="status",
                field_manager="kube-controller-manager",
            )
        except Exception:  # noqa: BLE001 - counted and reported
            self.errors += 1
        self.lags.append(time.time() - end)


def serve(jobs: int, seed: int, started: float) -> int:
    """The server process: populate, serve, end submitters when told; report on stop."""
    from tests.fakeapi.server import FakeApiServer  # only the server process loads aiohttp

    populating = time.perf_counter()
    server = FakeApiServer(history_size=max(1000, 2 * jobs), seed=seed, bookmark_interval=5.0)
    submitters = populate(server.store, jobs, seed, started=started)
    populate_s = time.perf_counter() - populating
    # The store's millions of dicts hold no cycles (refcounts free them) but the cyclic
    # collector walked them all on each full collection: seconds at 10,000 jobs, during
    # which the server answered nothing. Freeze what populating made; collect rarely.
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    server.start()
    intent = template_objects()["ConfigMap"]["data"][naming.INTENT_KEY]
    hello = {"url": server.url, "populate_s": populate_s, "intent": intent}
    print(json.dumps(hello), flush=True)
    loop = server._loop
    assert loop is not None  # started

    def on_loop(fn: Callable[[], None]) -> None:
        loop.call_soon_threadsafe(fn)

    kubelet = EndKubelet(server.store, submitters, on_loop)
    # Profiles of the window (paths in the environment): cProfile of the event loop's
    # thread (exact call counts and times per request) and samples of every thread.
    profile = os.environ.get(PROFILE_SERVER)
    # On the thread's CPU clock: on a busy machine wall time says more about the others.
    profiler = cProfile.Profile(time.thread_time) if profile else None
    sampling: tuple[Sampler, str] | None = None
    cpu_start = time.process_time()
    for line in sys.stdin:
        message = json.loads(line)
        if "ends" in message:
            cpu_start = time.process_time()
            kubelet.start({str(k): float(v) for k, v in message["ends"].items()})
            if profiler is not None:
                _on_server_loop(server, profiler.enable)
            sampling = sampler.started_from_env(SAMPLE_SERVER)
        if message.get("stop"):
            break
    if profiler is not None and profile:
        _on_server_loop(server, profiler.disable)
        profiler.dump_stats(profile)
    if sampling is not None:
        sampling[0].stop()
        sampling[0].write(sampling[1])
    # The syncer's watches are cut when it stops; aiohttp would log each as an error.
    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)
    lags = sorted(kubelet.lags)
    report = {
        "cpu_s": time.process_time() - cpu_start,
        "kubelet_ends": len(lags),
        "kubelet_errors": kubelet.errors,
        "kubelet_lag_p95_s": lags[int(0.95 * (len(lags) - 1))] if lags else None,
        "kubelet_lag_max_s": lags[-1] if lags else None,
        "peak_rss_mb": _rss_mb("VmHWM"),
    }
    print(json.dumps(report), flush=True)
    server.stop()
    return 0


def _on_server_loop(server: Any, fn: Callable[[], object]) -> None:
    """Run `fn` on the server's event-loop thread and wait for it (profilers are per thread)."""
    done = threading.Event()

    def call() -> None:
        fn()
        done.set()

    server._loop.call_soon_threadsafe(call)
    done.wait(10)


def _child_env() -> dict[str, str]:
    """This environment, with the repository importable."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


class ServerProcess:
    """The fake API server subprocess, spoken to over its stdin/stdout."""

    def __init__(self, jobs: int, seed: int, started: float) -> None:
        env = _child_env()
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.syncer",
                "--serve",
                f"--jobs={jobs}",
                f"--seed={seed}",
                f"--started={started!r}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            env=env,
            text=True,
        )
        hello = self._read()
        self.url = str(hello["url"])
        self.populate_s = float(hello["populate_s"])
        self.template_intent = str(hello["intent"])

    def _read(self) -> Manifest:
        stdout: IO[str] | None = self._process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the fake API server exited (code {self._process.wait()})")
        decoded: Manifest = json.loads(line)
        return decoded

    def _send(self, message: Manifest) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(json.dumps(message) + "\n")
        stdin.flush()

    def end_jobs(self, ends: dict[str, float]) -> None:
        """Have the kubelet end each job's submitter at its time."""
        self._send({"ends": ends})

    def stop(self) -> Manifest:
        """Stop the server; returns its report (CPU, kubelet lag, peak RSS)."""
        try:
            self._send({"stop": True})
            report = self._read()
            self._process.wait(timeout=60)
            return report
        except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            return {"error": repr(exc)}
        finally:
            self.kill()

    def kill(self) -> None:
        """Stop the process by its PID if it still runs; close the pipes."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


# --- the syncer side ---------------------------------------------------------------------------


def _rss_mb(field_name: str = "VmRSS") -> float:
    """A field of /proc/self/status in MB (VmRSS now, VmHWM peak)."""
    with Path("/proc/self/status").open(encoding="ascii") as status:
        for line in status:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    return math.nan


# How far along a job is: a status write that lowers it is a regression.
_STATE_RANK: Final = {rayjob.RUNNING: 2, rayjob.COMPLETE: 3, rayjob.FAILED: 3}


class RecordingKube(ForwardingKube):
    """`Kube` that forwards to a client and notes when each RayJob's finished status landed."""

    def __init__(self, inner: KubeClient) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self.finished: dict[str, float] = {}
        self.verbs: Counter[str] = Counter()
        self.reasons: Counter[str] = Counter()  # Events created, by reason
        self.regressions = 0  # status writes that move a job back (every job starts Running)
        self._ranks: dict[str, int] = {}

    def _after_write(self, verb: str, resource: Resource, body: Manifest) -> None:
        with self._lock:
            self.verbs[f"{verb} {resource.plural}"] += 1
            if resource.plural == "events":
                self.reasons[str(body.get("reason"))] += 1
        if resource.plural != "configmaps":
            return
        meta = body.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(naming.ROLE) != "status" or labels.get(naming.ORIGIN_KIND) != "RayJob":
            return  # a Ray cluster's status map (the RayCluster reconciler's) has no job state
        state = (body.get("data") or {}).get("jobDeploymentStatus")
        name = str(labels.get(naming.ORIGIN_NAME))
        rank = _STATE_RANK.get(str(state), 0)
        with self._lock:
            if rank < self._ranks.get(name, _STATE_RANK[rayjob.RUNNING]):
                self.regressions += 1
            self._ranks[name] = rank
            if state in FINISHED:
                self.finished.setdefault(name, time.time())


def measure_request_cost(url: str, samples: int = 300) -> float:
    """The median wall time of a loopback HTTP GET of one ConfigMap (keep-alive), on the
    connections the syncer's own client uses."""
    http = Connections(url, maxsize=1)
    name = naming.intent_configmap_name(job_name(0))
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{name}"
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        http.request("GET", path, None, {}, connect_s=10.0, read_s=10.0).read()
        times.append(time.perf_counter() - started)
    http.close()
    return statistics.median(times)


def _kube_client(url: str, token_file: Path) -> KubeClient:
    """A client as the syncer makes one in a Pod: the service-account path, which never
    imports the `kubernetes` package (plain HTTP here, so no CA file)."""
    token_file.write_text("bench-token\n", encoding="utf-8")
    return KubeClient(ServiceAccount(host=url, ca_file="", token_file=str(token_file)))


class _Clock:
    """The dashboards' clock: real time, except while `at` is set."""

    def __init__(self) -> None:
        self.at: float | None = None

    def __call__(self) -> float:
        return time.time() if self.at is None else self.at


def _dashboards(
    jobs: int, intent: str, started: float
) -> tuple[dict[str, FakeDashboard], dict[str, tuple[str, str]]]:
    """One dashboard per cluster whose job has run since `started`; (dashboards by URL,
    (URL, submission id) by job name)."""
    template = json.loads(intent)
    dashboards: dict[str, FakeDashboard] = {}
    where: dict[str, tuple[str, str]] = {}
    plan = JobPlan(pending_s=0.0, running_s=None)
    clock = _Clock()
    clock.at = started
    for index in range(jobs):
        name = job_name(index)
        derived = json.loads(json.dumps(template["derived"]).replace(TEMPLATE, name))
        url, submission = str(derived["dashboardURL"]), str(derived["submissionId"])
        dashboard = FakeDashboard(clock, job_plan=plan)
        dashboard.submit_job(submission, str(template["spec"]["entrypoint"]))
        dashboard.calls.clear()
        dashboards[url] = dashboard
        where[name] = (url, submission)
    clock.at = None
    return dashboards, where


def _end_at(dashboard: FakeDashboard, submission: str, end: float) -> None:
    """Make a running job end (SUCCEEDED) at `end`; plans are fixed at submission, so the
    fake's job record is edited in place (an atomic reference swap, safe under reads)."""
    job = dashboard._jobs[submission]
    job.plan = replace(job.plan, running_s=end - job.submitted - (job.plan.pending_s or 0.0))


def prime(url: str, jobs: int, intent: str, started: float, budget_rps: float) -> int:
    """The previous syncer (its own process): run until every cluster's status is published.

    A syncer restarting among running jobs finds what the one before it wrote: the RayJob
    statuses (`populate` writes those) and each RayCluster's status map and head-Pod
    annotation, which this process writes the way the syncer does, with no write limit,
    then stops. Its memory and CPU are not the measured syncer's.
    """
    dashboards, _ = _dashboards(jobs, intent, started)
    with tempfile.TemporaryDirectory(prefix="bench-prime-") as scratch:
        client = _kube_client(url, Path(scratch) / "token")
        kube = RecordingKube(client)
        options = Options(namespaces=(NAMESPACE,), dashboard_budget_rps=budget_rps)
        syncer = Syncer(kube, options, dashboards=lambda u: dashboards[u])
        syncer.start()
        deadline = time.monotonic() + 300 + 20 * jobs / budget_rps
        try:
            while time.monotonic() < deadline:
                time.sleep(0.2)
                with kube._lock:
                    published = kube.verbs["create configmaps"]
                if published >= jobs and syncer.engine.queue.ready() == 0:
                    break
            else:
                raise RuntimeError(f"prime: {published} of {jobs} cluster statuses published")
        finally:
            syncer.stop()
            client.close()
    return 0


def _prime(url: str, scale: Scale, intent: str, started: float) -> float:
    """Run `prime` in a subprocess; the seconds it took."""
    began = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.syncer",
            "--prime",
            url,
            f"--jobs={scale.jobs}",
            f"--budget={scale.budget_rps}",
            f"--started={started!r}",
        ],
        input=intent,
        text=True,
        check=True,
        cwd=REPO,
        env=_child_env(),
    )
    return time.perf_counter() - began


def run_syncer(scale: Scale, *, quiet: bool = False, verbose: bool = False) -> Run:
    """Run the syncer at one scale, then the KubeRay models on the same end times."""

    def say(text: str) -> None:
        if not quiet:
            print(f"syncer: {text}", flush=True)

    load_before = os.getloadavg()[0]
    rss_base = _rss_mb()
    scratch = tempfile.TemporaryDirectory(prefix="bench-syncer-")
    started = time.time()  # when every job was (simulated to be) seen Running
    server = ServerProcess(scale.jobs, scale.seed, started)
    kube_client: KubeClient | None = None
    syncer: Syncer | None = None
    try:
        say(f"{scale.jobs} jobs populated in {server.populate_s:.1f} s at {server.url}")
        primed_s = _prime(server.url, scale, server.template_intent, started)
        say(f"a previous syncer published every cluster's status in {primed_s:.1f} s")
        cost = measure_request_cost(server.url)
        dashboards, where = _dashboards(scale.jobs, server.template_intent, started)
        rss_dashboards = _rss_mb()
        kube_client = _kube_client(server.url, Path(scratch.name) / "token")
        kube = RecordingKube(kube_client)
        options = Options(
            namespaces=(NAMESPACE,), dashboard_budget_rps=scale.budget_rps, workers=scale.workers
        )
        engine_kube: Kube = kube
        if scale.write_qps > 0:  # as the daemon runs it: every write takes from one bucket
            bucket = TokenBucket(scale.write_qps, max(scale.write_burst, 1))
            engine_kube = GuardedKube(kube, AlwaysLeader(), bucket=bucket)
        syncer = Syncer(engine_kube, options, dashboards=lambda url: dashboards[url])
        grants = _time_dashboard_requests(syncer)
        restart = _warm_up(syncer, scale, kube)
        rss_warm = (_rss_mb(), _rss_mb("VmHWM"))
        warmup_s = restart.warmup_s
        say(
            f"warm-up (lists, then a pass of every job) {warmup_s:.1f} s: "
            f"{syncer.dashboards.requests.total()} dashboard requests, "
            f"{kube.verbs.total()} writes"
        )
        sampling = sampler.started_from_env(SAMPLE_SYNCER)
        t0 = time.time()
        grants_t0 = len(grants)
        rng = random.Random(scale.seed)
        ends = {
            job_name(i): t0 + scale.lead_s + rng.random() * scale.spread_s
            for i in range(scale.jobs)
        }
        for name, end in ends.items():
            url, submission = where[name]
            _end_at(dashboards[url], submission, end)
        server.end_jobs(ends)
        window = _Window(syncer, kube_client, kube.verbs.total, t0, say if verbose else None)
        stop_at = max(ends.values()) + 60.0 + scale.jobs / scale.budget_rps
        while len(kube.finished) < scale.jobs and time.time() < stop_at:
            time.sleep(0.25)
            window.sample(len(kube.finished))
        t_done = max(kube.finished.values()) if len(kube.finished) == scale.jobs else time.time()
        window.sample(len(kube.finished), force=True)
        # The writes that wait for spare tokens (Events, releasing the pods) come after the
        # statuses: the requests are counted until they are done too (CPU and job-hours
        # stay those of the window).
        tail_s = _drain(syncer, engine_kube, scale.jobs, stop_at + 120.0)
        window.recount()
        if sampling is not None:
            sampling[0].stop()
            sampling[0].write(sampling[1])
        rss_peak = _rss_mb("VmHWM")
        held = engine_kube.events if isinstance(engine_kube, GuardedKube) else None
        events_dropped = held.dropped if held is not None else 0
        if verbose:
            stats = syncer.engine.stats + syncer.rayjob.stats
            say(f"writes {dict(sorted(kube.verbs.items()))}; stats {dict(stats)}")
            say(f"events by reason {dict(sorted(kube.reasons.items()))}")
            say(f"after the last status: {tail_s:.1f} s until Events and releases were done")
        syncer.stop()
        syncer = None
        report = server.stop()
    finally:
        if syncer is not None:
            syncer.stop()
        server.kill()
        if kube_client is not None:
            kube_client.close()
        scratch.cleanup()
    delays = [kube.finished[n] - end for n, end in ends.items() if n in kube.finished]
    series = sorted(
        (end - t0, kube.finished[n] - end) for n, end in ends.items() if n in kube.finished
    )
    job_hours = sum(min(end, t_done) - t0 for end in ends.values()) / 3600
    ours = Figures(
        "syncer",
        delays,
        scale.jobs - len(delays),
        window.dashboard_requests,
        window.kube_requests,
        window.kube_writes,
        job_hours,
        t_done - t0,
        peak_dashboard_rps=_peak_in_any_second(grants[grants_t0:]),
        cpu_s=window.cpu_s,
        peak_cores=window.peak_cores,
        series=series,
    )
    models = [
        kuberay_model(ends, t0, cost, events=False),
        kuberay_model(ends, t0, cost, events=True),
        kuberay_model(ends, t0, cost, events=True, client_limit=False),
    ]
    return Run(
        scale=scale,
        syncer=ours,
        models=models,
        request_cost_s=cost,
        warmup_s=warmup_s,
        restart=restart,
        populate_s=server.populate_s,
        rss_base_mb=rss_base,
        rss_dashboards_mb=rss_dashboards - rss_base,
        rss_increase_mb=rss_peak - rss_dashboards,
        server=report,
        load=(load_before, os.getloadavg()[0]),
        tail_s=tail_s,
        events_dropped=events_dropped,
        complete_events=kube.reasons["Complete"],
        rss_warm_mb=(
            rss_base + rss_warm[0] - rss_dashboards,
            rss_base + rss_warm[1] - rss_dashboards,
        ),
    )


@dataclass(frozen=True)
class Restart:
    """A syncer starting among running jobs: until every job was looked at once."""

    warmup_s: float  # from start until every job was seen Running and nothing is queued
    lists_s: float  # from start to the first pass (the caches' lists)
    observed_s: float  # from start until every job had had a pass
    order: float  # rank correlation of first pass with age (1: strictly oldest first)
    regressions: int  # status writes in the warm-up that moved a job back from Running


def _drain(syncer: Syncer, kube: Kube, jobs: int, deadline: float) -> float:
    """Wait until every job's pods were released and no Event waits; the seconds it took."""
    started = time.time()
    held = kube.events if isinstance(kube, GuardedKube) else None
    while time.time() < deadline:
        released = syncer.rayjob.stats["released_pods"]
        if released >= jobs and (held is None or len(held) == 0):
            break
        time.sleep(0.25)
    return time.time() - started


def _time_dashboard_requests(syncer: Syncer) -> array[float]:
    """When each budgeted dashboard request was made (after its token), on the monotonic
    clock: the peak over every 1-s window is computed from these."""
    stamps: array[float] = array("d")
    pool = syncer.dashboards
    original = pool.call

    def call(name: str, url: str, fn: Callable[[Any], Any]) -> Any:
        def timed(dashboard: Any) -> Any:
            stamps.append(time.monotonic())
            return fn(dashboard)

        return original(name, url, timed)

    pool.call = call  # type: ignore[method-assign]
    return stamps


def _peak_in_any_second(stamps: Sequence[float]) -> float:
    """The most requests in any sliding 1-s window [t, t + 1)."""
    ordered = sorted(stamps)
    return float(
        max(
            (bisect_left(ordered, start + 1.0) - i for i, start in enumerate(ordered)),
            default=0,
        )
    )


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    for rank, index in enumerate(order):
        ranks[index] = float(rank)
    return ranks


def _warm_up(syncer: Syncer, scale: Scale, kube: RecordingKube) -> Restart:
    """Start the syncer; wait until every job was seen Running and nothing is queued.

    Notes when each job first had a pass (sampled every 0.1 s), to tell how long a
    restart takes to look at every job and in which order.
    """
    started = time.perf_counter()
    writes0 = kube.regressions
    syncer.start()
    deadline = time.monotonic() + 120 + 4 * scale.jobs / scale.budget_rps
    first: dict[str, float] = {}
    while True:
        now = time.perf_counter() - started
        states, _ = syncer.rayjob.snapshot()  # a copy under the reconciler's lock
        if len(first) < scale.jobs:
            for key in states:
                first.setdefault(key[2], now)
        seen = sum(1 for state in states.values() if state == rayjob.RUNNING)
        if seen == scale.jobs and syncer.engine.queue.ready() == 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"warm-up: {seen} of {scale.jobs} jobs seen Running")
        time.sleep(0.1)
    names = sorted(first)
    ages = [-job_age_s(n, scale.seed) for n in names]
    order = statistics.correlation(_ranks(ages), _ranks([first[n] for n in names]))
    return Restart(
        warmup_s=time.perf_counter() - started,
        lists_s=min(first.values(), default=math.nan),
        observed_s=max(first.values(), default=math.nan),
        order=order if not math.isnan(order) else 0.0,
        regressions=kube.regressions - writes0,
    )


class _Window:
    """Counters over the measured window, sampled about once a second."""

    def __init__(
        self,
        syncer: Syncer,
        kube: KubeClient,
        writes: Callable[[], int],
        t0: float,
        say: Callable[[str], None] | None,
    ) -> None:
        self._syncer = syncer
        self._kube = kube
        self._writes = writes
        self._writes0 = writes()
        self._t0 = t0
        self._say = say
        self._dashboard0 = syncer.dashboards.requests.total()
        self._kube0 = kube.requests
        self._cpu0 = time.process_time()
        self._last = (time.monotonic(), self._dashboard0, self._cpu0)
        self._cpu_marks: deque[tuple[float, float]] = deque([(self._last[0], self._cpu0)])
        self.peak_rps = 0.0
        self.peak_cores = 0.0
        self.dashboard_requests = 0
        self.kube_requests = 0
        self.kube_writes = 0
        self.cpu_s = 0.0

    def recount(self) -> None:
        """Update the request totals only (after the window: no CPU, no peaks)."""
        self.kube_requests = self._kube.requests - self._kube0
        self.kube_writes = self._writes() - self._writes0

    def sample(self, finished: int, *, force: bool = False) -> None:
        """Update the totals; the peaks over each second (requests) and 10 s (CPU)."""
        now, dashboard, cpu = (
            time.monotonic(),
            self._syncer.dashboards.requests.total(),
            time.process_time(),
        )
        self.dashboard_requests = dashboard - self._dashboard0
        self.kube_requests = self._kube.requests - self._kube0
        self.kube_writes = self._writes() - self._writes0
        self.cpu_s = cpu - self._cpu0
        last_time, last_dashboard, _ = self._last
        if now - last_time < 1.0 and not force:
            return
        rate = (dashboard - last_dashboard) / max(now - last_time, 1e-9)
        self.peak_rps = max(self.peak_rps, rate)
        self._last = (now, dashboard, cpu)
        self._cpu_marks.append((now, cpu))
        while now - self._cpu_marks[0][0] > 10.0:
            self._cpu_marks.popleft()
        first_time, first_cpu = self._cpu_marks[0]
        if now - first_time >= 5.0:
            self.peak_cores = max(self.peak_cores, (cpu - first_cpu) / (now - first_time))
        if self._say is not None:
            self._say(
                f"t={time.time() - self._t0:6.1f} s ready={self._syncer.engine.queue.ready()} "
                f"finished={finished} dashboard={rate:.0f}/s "
                f"kube={self.kube_requests} cpu={self.cpu_s:.1f} s rss={_rss_mb():.0f} MB"
            )


# --- KubeRay's model ---------------------------------------------------------------------------


def kuberay_model(
    ends: dict[str, float],
    t0: float,
    cost: float,
    *,
    events: bool,
    client_limit: bool = True,
    requeue_s: float = KUBERAY_REQUEUE_S,
    submitters: dict[str, float] | None = None,
) -> Figures:
    """KubeRay's RayJob loop at concurrency 1 on a simulated clock.

    Every reconcile of a running RayJob makes one GetJobInfo (`cost` seconds) and requeues
    after `requeue_s`; the pass that sees the job ended also updates the status (another
    `cost`), which is when Complete is published, and does not requeue. That update's own
    watch event queues the key once more, for the pass that deletes the RayCluster
    (`cost`). Keys wait in a FIFO without duplicates, as in client-go's work queue. The
    loop runs from a steady state (every job due at a random point of one cycle before
    t0). With `events`, a job's end also queues its key (the owned submitter Job's watch
    event). With `client_limit`, each write first waits for a token of its kind's bucket
    (`KUBERAY_CLIENT_QPS`), and the one worker waits with it. `submitters`: when each
    job's submitter Job was Complete, if later than its end: KubeRay publishes Complete
    only once the submitter finished too (rayjob.md 4.3), and that Job's event is the one
    that queues the key; a pass that sees Ray's end before then writes the status once
    more (its `jobStatus`). Delays still count from the Ray job's end.
    """
    names = list(ends)
    done = {n: max(end, (submitters or {}).get(n, end)) for n, end in ends.items()}
    rng = random.Random(len(names))
    cycle = max(requeue_s, len(names) * cost)
    clock = t0 - 2 * cycle
    timers: list[tuple[float, str]] = [(clock + rng.random() * cycle, n) for n in names]
    heapq.heapify(timers)
    arrivals = sorted((at, n) for n, at in done.items()) if events else []
    ready: deque[str] = deque()
    queued: set[str] = set()
    finished: dict[str, float] = {}
    cleanup: set[str] = set()  # finished, their RayCluster not yet deleted
    ray_ended: set[str] = set()  # Ray's end written, the submitter not yet finished
    gets = writes = 0
    horizon = max(done.values()) + 10 * cycle + 60 + 4 * len(names) / KUBERAY_CLIENT_QPS
    # One bucket per kind written (RayJob status, RayCluster), on the simulated clock.
    buckets = [
        TokenBucket(KUBERAY_CLIENT_QPS, KUBERAY_CLIENT_BURST, clock=lambda: clock) for _ in range(2)
    ]

    def write(kind: int) -> None:
        nonlocal clock
        if client_limit:
            clock += buckets[kind].reserve()
        clock += cost

    def enqueue(name: str) -> None:
        if name not in queued and (name not in finished or name in cleanup):
            queued.add(name)
            ready.append(name)

    arrival = 0
    while (len(finished) < len(names) or cleanup) and clock < horizon:
        while timers and timers[0][0] <= clock:
            enqueue(heapq.heappop(timers)[1])
        while arrival < len(arrivals) and arrivals[arrival][0] <= clock:
            enqueue(arrivals[arrival][1])
            arrival += 1
        if not ready:
            upcoming = [timers[0][0]] if timers else []
            if arrival < len(arrivals):
                upcoming.append(arrivals[arrival][0])
            if not upcoming:
                break
            clock = min(upcoming)
            continue
        name = ready.popleft()
        queued.discard(name)
        if name in cleanup:  # the pass after its own status update
            write(1)  # the RayCluster delete (its Event is sent in the background)
            cleanup.discard(name)
            continue
        answered = clock + cost / 2  # the dashboard's view, mid-request
        clock += cost
        if clock >= t0:
            gets += 1
        if done[name] <= answered:
            write(0)  # the status update
            writes += KUBERAY_FINISH_WRITES
            finished[name] = clock
            cleanup.add(name)
            enqueue(name)
        else:
            if ends[name] <= answered and name not in ray_ended:
                # Ray's end before its submitter's: KubeRay updates `jobStatus` then, a
                # status write of its own (it writes a status only when it changed).
                ray_ended.add(name)
                write(0)
                writes += 1
            heapq.heappush(timers, (clock + requeue_s, name))
    delays = [finished[n] - ends[n] for n in names if n in finished]
    t_done = max(finished.values()) if len(finished) == len(names) else horizon
    job_hours = sum(min(end, t_done) - t0 for end in ends.values()) / 3600
    label = "kuberay model + Job events" if events else "kuberay model"
    if not client_limit:
        label += ", no client limit"
    # Its reads come from its informer caches; the informers renew their watches.
    watches = round(KUBERAY_WATCHED_KINDS * (t_done - t0) / KUBERAY_WATCH_RENEWAL_S)
    return Figures(
        label,
        delays,
        len(names) - len(delays),
        gets,
        writes + watches,
        writes,
        job_hours,
        t_done - t0,
        notes={"sweep_s": f"{len(names) * cost:.2f}"},
        series=sorted((ends[n] - t0, finished[n] - ends[n]) for n in names if n in finished),
    )


# --- report ------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "inf"
    return f"{value:,.{digits}f}"


def report(run: Run) -> list[str]:
    """The printed lines of one run."""
    scale, ours = run.scale, run.syncer
    sides = [ours, *run.models]
    simulated = ["n/a (simulated)"] * len(run.models)
    rows: list[tuple[str, list[str]]] = [
        ("delay p50 (s)", [_fmt(f.percentile(0.5), 3) for f in sides]),
        ("delay p95 (s)", [_fmt(f.percentile(0.95), 3) for f in sides]),
        ("delay max (s)", [_fmt(f.percentile(1.0), 3) for f in sides]),
        ("not published", [str(f.missing) for f in sides]),
        ("dashboard req / job-hour", [_fmt(f.dashboard_per_job_hour, 0) for f in sides]),
        ("kubernetes req / job-hour", [_fmt(f.kube_per_job_hour, 0) for f in sides]),
        ("  of which writes", [_fmt(f.writes_per_job_hour, 0) for f in sides]),
        ("writes / finished job", [_fmt(_writes_per_finished(f), 2) for f in sides]),
        ("peak dashboard req/s (1 s)", [_fmt(ours.peak_dashboard_rps, 0), *simulated]),
        ("CPU, cores (mean)", [_fmt(ours.cores), *simulated]),
        ("CPU, cores (peak 10 s)", [_fmt(ours.peak_cores), *simulated]),
        ("peak RSS (MB)", [_fmt(run.syncer_rss_mb, 0), *simulated]),
    ]
    width = max(len(r[0]) for r in rows) + 1
    column = max(len(f.name) for f in sides) + 2
    server = run.server
    lines = [
        f"{scale.jobs} RayJobs (K8sJobMode, one 1-pod cluster each) end "
        f"{scale.lead_s:.0f}-{scale.lead_s + scale.spread_s:.0f} s into the window; "
        f"dashboard budget {scale.budget_rps:.0f} req/s, {scale.workers} workers; "
        f"load average {run.load[0]:.1f} before, {run.load[1]:.1f} after",
        f"set-up: populate {run.populate_s:.1f} s (server process), warm-up "
        f"{run.warmup_s:.1f} s; window {ours.window_s:.1f} s, {ours.job_hours:.2f} job-hours",
        f"model cost: a loopback HTTP GET takes {run.request_cost_s * 1000:.2f} ms (median), "
        f"so a KubeRay sweep of every job takes {scale.jobs * run.request_cost_s:.2f} s",
        f"{'':{width}}" + "".join(f"{f.name:>{column}}" for f in sides),
    ]
    lines.extend(
        f"{label:{width}}" + "".join(f"{v:>{column}}" for v in values) for label, values in rows
    )
    lines.append(
        f"RSS: interpreter and imports {run.rss_base_mb:.0f} MB + syncer "
        f"{run.rss_increase_mb:.0f} MB (not counted: {run.rss_dashboards_mb:.0f} MB of simulated "
        f"dashboards); after the warm-up {run.rss_warm_mb[0]:.0f} MB, peak until then "
        f"{run.rss_warm_mb[1]:.0f} MB; CPU {ours.cpu_s or 0:.1f} s over the window"
    )
    lines.append(
        f"fake API server process: CPU {_fmt(server.get('cpu_s'), 1)} s over the window, "
        f"peak RSS {_fmt(server.get('peak_rss_mb'), 0)} MB; submitters ended late by "
        f"{_fmt(server.get('kubelet_lag_p95_s'), 3)} s (p95), "
        f"{_fmt(server.get('kubelet_lag_max_s'), 3)} s (max); errors {server.get('kubelet_errors')}"
    )
    restart = run.restart
    lines.append(
        f"restart among {scale.jobs} running jobs: every job had a pass after "
        f"{restart.observed_s:.1f} s (floor jobs/budget {scale.jobs / scale.budget_rps:.1f} s, "
        f"ratio {restart.observed_s / max(scale.jobs / scale.budget_rps, 1e-9):.2f}; lists "
        f"{restart.lists_s:.1f} s); oldest-first rank correlation {restart.order:.2f}; "
        f"status regressions {restart.regressions}"
    )
    lines.append(
        f"deferred writes: Events and pod releases done {run.tail_s:.1f} s after the last "
        f"status; Complete Events recorded {run.complete_events} of {scale.jobs}, "
        f"Events dropped {run.events_dropped} (whole run)"
    )
    lines.extend(_targets(run))
    return lines


def _targets(run: Run) -> list[str]:
    """Issue 13's targets, against the KubeRay models measured in the same run."""
    ours, jobs, budget = run.syncer, run.scale.jobs, run.scale.budget_rps
    plain, events, _ = run.models
    p95 = ours.percentile(0.95)
    checks: list[tuple[str, bool]] = []
    if jobs <= 1000:
        checks.append(("p95 <= 1 s", p95 <= 1.0))
    elif run.scale.spread_s < 120:  # a burst
        checks.append(("p95 <= 5 s", p95 <= 5.0))
        checks.append(("p95 <= model + Job events", p95 <= events.percentile(0.95)))
        checks.append(("max <= 15 s", ours.percentile(1.0) <= 15.0))
    else:
        checks.append(("p95 <= 0.2 s", p95 <= 0.2))
    checks.append(
        ("dashboard <= budget in every 1-s window", (ours.peak_dashboard_rps or 0) <= budget)
    )
    checks.append(
        ("kubernetes req/job-hour <= model", ours.kube_per_job_hour <= plain.kube_per_job_hour)
    )
    checks.append(("writes/finished job <= 3", _writes_per_finished(ours) <= 3.0))
    restart = run.restart
    checks.append(("restart <= 1.2 x jobs/budget", restart.observed_s <= 1.2 * jobs / budget))
    checks.append(("no status regressed", restart.regressions == 0))
    if jobs >= 2000:
        checks.append(("RSS <= 150 MB", run.syncer_rss_mb <= 150))
        checks.append(("CPU <= 0.5 core", (ours.cores or 0) <= 0.5))
    return ["targets: " + ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in checks)]


def _writes_per_finished(figures: Figures) -> float:
    return figures.kube_writes / len(figures.delays) if figures.delays else math.nan


def summary(run: Run) -> str:
    """One line of `key=value` words a script can split (`syncer-summary ...`)."""
    ours, (plain, events, unlimited) = run.syncer, run.models
    values: dict[str, float | int | str] = {
        "jobs": run.scale.jobs,
        "spread_s": run.scale.spread_s,
        "budget_rps": run.scale.budget_rps,
        "write_qps": run.scale.write_qps,
        "load_before": run.load[0],
        "load_after": run.load[1],
        "p50_s": ours.percentile(0.5),
        "p95_s": ours.percentile(0.95),
        "max_s": ours.percentile(1.0),
        "missing": ours.missing,
        "model_p95_s": plain.percentile(0.95),
        "model_events_p95_s": events.percentile(0.95),
        "p95_vs_model_events": ours.percentile(0.95) / max(events.percentile(0.95), 1e-9),
        "model_events_unlimited_p95_s": unlimited.percentile(0.95),
        "dashboard_per_job_hour": ours.dashboard_per_job_hour,
        "model_dashboard_per_job_hour": plain.dashboard_per_job_hour,
        "kube_per_job_hour": ours.kube_per_job_hour,
        "model_kube_per_job_hour": plain.kube_per_job_hour,
        "writes_per_finished_job": _writes_per_finished(ours),
        "peak_dashboard_rps_1s": ours.peak_dashboard_rps or 0.0,
        "cpu_cores_mean": ours.cores or 0.0,
        "cpu_cores_peak10s": ours.peak_cores or 0.0,
        "rss_mb": run.syncer_rss_mb,
        "rss_base_mb": run.rss_base_mb,
        "rss_warm_mb": run.rss_warm_mb[0],
        "rss_warm_peak_mb": run.rss_warm_mb[1],
        "restart_observed_s": run.restart.observed_s,
        "restart_floor_s": run.scale.jobs / run.scale.budget_rps,
        "restart_lists_s": run.restart.lists_s,
        "restart_order": run.restart.order,
        "regressions": run.restart.regressions,
        "server_cpu_s": float(run.server.get("cpu_s") or math.nan),
        "tail_s": run.tail_s,
        "complete_events": run.complete_events,
        "events_dropped": run.events_dropped,
    }
    words = (f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
    return "syncer-summary " + " ".join(words)


def plot(run: Run, path: Path) -> Path:
    """Delay (y, s) over the job's end time (x, s into the window): the syncer in red,
    KubeRay's model with Job events in blue, without them in grey (both with its client
    limit)."""
    plain, events, _ = run.models
    return png.scatter(
        path,
        [
            (plain.series, (170, 170, 170)),
            (events.series, (40, 90, 220)),
            (run.syncer.series, (220, 40, 40)),
        ],
    )


def main(argv: Sequence[str] | None = None) -> list[Run]:
    """`python -m bench syncer [--jobs N ...] [--budget RPS] [--lead S] [--spread S]`.

    Several scales run one after another, each in a process of its own; returns the runs
    made in this process.
    """
    parser = argparse.ArgumentParser(prog="python -m bench syncer")
    parser.add_argument("--jobs", type=int, action="append", help="a scale (repeatable)")
    parser.add_argument("--budget", type=float, default=200.0, help="dashboard req/s")
    parser.add_argument("--lead", type=float, help="seconds before the first job ends")
    parser.add_argument("--spread", type=float, help="seconds over which the jobs end")
    parser.add_argument("--verbose", action="store_true", help="print progress every second")
    parser.add_argument("--plot", help="write a PNG of delay over time here (one scale)")
    parser.add_argument("--workers", type=int, default=8, help="the syncer's worker threads")
    parser.add_argument(
        "--api-write-qps",
        type=float,
        default=Config().api_write_qps,
        help="the daemon's API write limit, with burst twice that (0: no limit)",
    )
    parser.add_argument(
        "--real", action="store_true", help="on a real control plane (bench.realcp; one scale)"
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prime", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.serve:
        serve(args.jobs[0], args.seed, args.started)
        return []
    if args.prime:
        prime(args.prime, args.jobs[0], sys.stdin.read(), args.started, args.budget)
        return []
    if args.real:
        from bench import realcp

        jobs = (args.jobs or [100])[0]
        realcp.main(jobs, args.lead, args.spread, args.budget, args.api_write_qps)
        return []
    scales = args.jobs or list(SCALES)
    if len(scales) > 1:
        # One process per scale, so each measures its memory from a fresh interpreter.
        options = [
            f"--budget={args.budget}",
            f"--workers={args.workers}",
            *(["--verbose"] if args.verbose else []),
        ]
        for name, value in (("lead", args.lead), ("spread", args.spread)):
            if value is not None:
                options.append(f"--{name}={value}")
        for jobs in scales:
            subprocess.run(
                [sys.executable, "-m", "bench.syncer", f"--jobs={jobs}", *options],
                check=True,
                cwd=REPO,
                env=_child_env(),
            )
        return []
    memory.limit_malloc_arenas()  # as the daemon does, before the syncer's threads start
    runs = []
    for jobs in scales:
        scale = Scale.default(jobs, args.budget)
        if args.lead is not None:
            scale = replace(scale, lead_s=args.lead)
        if args.spread is not None:
            scale = replace(scale, spread_s=args.spread)
        scale = replace(
            scale,
            workers=args.workers,
            write_qps=args.api_write_qps,
            write_burst=int(args.api_write_qps * 2),
        )
        run = run_syncer(scale, verbose=args.verbose)
        for line in report(run):
            print(f"syncer: {line}", flush=True)
        print(summary(run), flush=True)
        if args.plot:
            where = plot(run, Path(args.plot))
            print(
                f"syncer: plot of delay over end time (red: syncer, blue: KubeRay model with "
                f"Job events, grey: without) in {where}",
                flush=True,
            )
        runs.append(run)
    return runs


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
