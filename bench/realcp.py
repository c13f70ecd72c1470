"""The syncer benchmark on a real control plane, at a small scale, beside KubeRay's model.

`python -m bench syncer --real --jobs 200` starts etcd, kube-apiserver,
kube-controller-manager and kube-scheduler on 127.0.0.1 (`tests.realapi.controlplane`, the
binaries `tools/k8s/build` caches) and the test kubelet of `tests.realapi.kubelet` (one
Node; it marks bound pods Running and Ready and runs a submitter pod's process). Every
RayJob is rendered and applied as a GitOps tool would; the real Job controller makes the
gated submitter pods, the syncer ungates them, the real scheduler binds them, and the
kubelet runs each as `sleep` until its job's end time, when it exits 0: the kubelet marks
the pod Succeeded, the real Job controller marks the Job Complete, and the syncer reacts
to that. Each cluster's dashboard is a `FakeDashboard` whose job ends at the same time.
The syncer's writes take the daemon's write limiter (`--api-write-qps`), as in `bench.syncer`.

The delay is the same as on the fake server (the Complete status write returned, minus the
job's end), so it includes the kubelet's step and the Job controller's reaction. KubeRay
waits for the submitter Job as well, so its models (the same simulation as
`bench.syncer`'s, costed with a GET against this apiserver) see each job end when its Job
was seen Complete here; the report splits the delay into the kubelet's, the Job
controller's and the syncer's parts (polled every 0.2 s). No restart, no CPU profile:
the control plane shares the machine, and this run says what a real apiserver changes,
not the syncer's limits.
"""

from __future__ import annotations

import http.client
import json
import random
import ssl
import statistics
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import syncer as bench
from syncer.cli import Options, Syncer
from syncer.kube.client import Kube, KubeClient
from syncer.kube.incluster import ServiceAccount
from syncer.kube.leader import AlwaysLeader, GuardedKube
from syncer.kube.ratelimit import TokenBucket

Manifest = dict[str, Any]
SUBMITTER = "ray-job-submitter"


def _objects(jobs: int) -> tuple[list[list[Manifest]], str]:
    """Each job's rendered objects (the template's, under the job's name), and the
    template's intent text."""
    from renderer import naming
    from tests.syncer.harness import render

    template = render(bench.RAYJOB, bench.NAMESPACE)
    intent = next(o for o in template if o["metadata"]["name"].endswith("-kuberay-intent"))
    text = json.dumps(template)
    per_job = [json.loads(text.replace(bench.TEMPLATE, bench.job_name(i))) for i in range(jobs)]
    return per_job, str(intent["data"][naming.INTENT_KEY])


def _request_cost(server: str, token: str, ca: Path, samples: int = 200) -> float:
    """The median wall time of one authenticated GET of a ConfigMap on a kept-alive TLS
    connection, as an operator's client makes it (the model is costed with it)."""
    context = ssl.create_default_context(cafile=str(ca))
    host, _, port = server.removeprefix("https://").partition(":")
    connection = http.client.HTTPSConnection(host, int(port or 443), context=context, timeout=10)
    path = f"/api/v1/namespaces/{bench.NAMESPACE}/configmaps/kube-root-ca.crt"
    headers = {"Authorization": f"Bearer {token}"}
    times = []
    try:
        for _ in range(samples):
            started = time.perf_counter()
            connection.request("GET", path, headers=headers)
            connection.getresponse().read()
            times.append(time.perf_counter() - started)
    finally:
        connection.close()
    return statistics.median(times)


def _install_crds(rest: Any) -> None:
    """The CRDs the realapi tests install (the syncer's informers list their kinds)."""
    from tests.realapi.crds import all_crds
    from tests.realapi.gitops import apply_all

    definitions = all_crds()
    failures = apply_all(rest, definitions, namespace="default", manager="bench-setup")
    if failures:
        raise RuntimeError(f"CRDs not applied: {failures}")
    deadline = time.monotonic() + 60
    for name in (d["metadata"]["name"] for d in definitions):
        while True:
            crd = rest.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name)
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {name} not Established: {conditions}")
            time.sleep(0.2)


class _EndWatch:
    """When each submitter pod was first seen Succeeded (the kubelet's step) and each Job
    Complete (the Job controller's), polled every 0.2 s: what the control plane adds to
    the delay before the syncer can publish the end."""

    def __init__(self, rest: Any) -> None:
        self._rest = rest
        self.pod_done: dict[str, float] = {}
        self.job_done: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="end-watch", daemon=True)

    def start(self) -> _EndWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            now = time.time()
            for job in self._rest.list("batch/v1", "Job", bench.NAMESPACE):
                conditions = (job.get("status") or {}).get("conditions") or []
                if any(c["type"] == "Complete" and c["status"] == "True" for c in conditions):
                    self.job_done.setdefault(job["metadata"]["name"], now)
            for pod in self._rest.list("v1", "Pod", bench.NAMESPACE, labelSelector="job-name"):
                if (pod.get("status") or {}).get("phase") == "Succeeded":
                    self.pod_done.setdefault(pod["metadata"]["labels"]["job-name"], now)


def _lag(later: dict[str, float], earlier: dict[str, float]) -> str:
    """p50 / p95 of `later[n] - earlier[n]` over the names in both, formatted."""
    lags = [later[n] - earlier[n] for n in later if n in earlier]
    if not lags:
        return "n/a"
    return f"{bench.quantile(lags, 0.5):.2f} / {bench.quantile(lags, 0.95):.2f} s"


def run_real(scale: bench.Scale, *, say: Any = print) -> list[str]:
    """Run the syncer among `scale.jobs` RayJobs on a real control plane; the report lines."""
    from tests.realapi.controlplane import ControlPlane, binaries
    from tests.realapi.kubelet import TestKubelet
    from tests.realapi.rest import Rest
    from tests.syncer.harness import apply

    scratch = tempfile.TemporaryDirectory(prefix="bench-realcp-")
    work = Path(scratch.name)
    plane = ControlPlane(binaries(), workdir=work / "plane").start()
    say(f"control plane {plane.server} started in {plane.startup_s:.1f} s")
    ends: dict[str, float] = {}
    rest = Rest(plane.server, plane.admin_token, ca=plane.ca, user_agent="bench-kubelet")

    def runner(pod: Manifest) -> tuple[list[str], dict[str, str]] | None:
        containers = pod["spec"]["containers"]
        if containers[0]["name"] != SUBMITTER:
            return None  # Ray pods: Running and Ready, no process
        name = pod["metadata"]["labels"].get("job-name", "")
        left = max(0.0, ends.get(name, time.time()) - time.time())
        return ["sleep", f"{left:.3f}"], {}

    kubelet = TestKubelet(rest, log_dir=work / "pods", runner=runner, interval=0.1).start()
    syncer: Syncer | None = None
    kube: KubeClient | None = None
    watch = _EndWatch(rest)
    try:
        _install_crds(rest)  # the RayService reconciler watches Gateway API kinds
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {}}
        namespace["metadata"] = {"name": bench.NAMESPACE}
        rest.create(namespace)
        # Pods are admitted once the ServiceAccount controller made the namespace's default.
        deadline = time.monotonic() + 60
        while rest.get_or_none("v1", "ServiceAccount", bench.NAMESPACE, "default") is None:
            if time.monotonic() > deadline:
                raise RuntimeError("no default ServiceAccount in the bench namespace")
            time.sleep(0.2)
        token_file = work / "token"
        token_file.write_text(plane.admin_token + "\n", encoding="utf-8")
        kube = KubeClient(ServiceAccount(plane.server, str(plane.ca), str(token_file)))
        per_job, intent_text = _objects(scale.jobs)
        # Applied before the syncer starts: the submitter pods stay gated until it does,
        # so every submitter's `sleep` starts after its end time is known.
        applying = time.time()
        for objects in per_job:
            apply(kube, objects, bench.NAMESPACE)
        say(f"{scale.jobs} RayJobs applied in {time.time() - applying:.1f} s")
        started = time.time()
        dashboards, where = bench._dashboards(scale.jobs, intent_text, started)
        # When each job ends: after every job was seen Running and ran a while.
        rng = random.Random(scale.seed)
        t0 = time.time() + 20.0 + scale.jobs * 0.2
        for i in range(scale.jobs):
            ends[bench.job_name(i)] = t0 + scale.lead_s + rng.random() * scale.spread_s
        for name, end in ends.items():
            url, submission = where[name]
            bench._end_at(dashboards[url], submission, end)
        recording = bench.RecordingKube(kube)
        options = Options(
            namespaces=(bench.NAMESPACE,),
            dashboard_budget_rps=scale.budget_rps,
            workers=scale.workers,
        )
        engine_kube: Kube = recording
        if scale.write_qps > 0:  # as the daemon runs it, and as bench.syncer does
            bucket = TokenBucket(scale.write_qps, max(scale.write_burst, 1))
            engine_kube = GuardedKube(recording, AlwaysLeader(), bucket=bucket)
        syncer = Syncer(engine_kube, options, dashboards=lambda url: dashboards[url])
        syncer.start()
        watch.start()
        while time.time() < t0:
            time.sleep(0.5)
        states, _ = syncer.rayjob.snapshot()
        running = sum(1 for s in states.values() if s == "Running")
        say(f"at the window's start {running} of {scale.jobs} jobs Running")
        writes0 = recording.verbs.total()
        verbs0 = dict(recording.verbs)
        requests0, dashboard0 = kube.requests, syncer.dashboards.requests.total()
        cost = _request_cost(plane.server, plane.admin_token, plane.ca)
        stop_at = max(ends.values()) + 60.0
        while len(recording.finished) < scale.jobs and time.time() < stop_at:
            time.sleep(0.25)
        done = len(recording.finished) == scale.jobs
        t_done = max(recording.finished.values()) if done else time.time()
        verbs = {k: v - verbs0.get(k, 0) for k, v in recording.verbs.items()}
        writes = recording.verbs.total() - writes0
        requests = kube.requests - requests0
        dashboard = syncer.dashboards.requests.total() - dashboard0
        rss = bench._rss_mb("VmHWM")
    finally:
        watch.stop()
        if syncer is not None:
            syncer.stop()
        if kube is not None:
            kube.close()
        kubelet.stop()
        plane.stop()
        scratch.cleanup()
    delays = [recording.finished[n] - e for n, e in ends.items() if n in recording.finished]
    job_hours = sum(min(e, t_done) - t0 for e in ends.values()) / 3600
    ours = bench.Figures(
        "syncer (real apiserver)",
        delays,
        scale.jobs - len(delays),
        dashboard,
        requests,
        writes,
        job_hours,
        t_done - t0,
    )
    # KubeRay too publishes Complete only once the submitter Job is Complete: its models
    # start from the Job controller's completion times measured here.
    completed = watch.job_done
    models = [
        bench.kuberay_model(ends, t0, cost, events=False, submitters=completed),
        bench.kuberay_model(ends, t0, cost, events=True, submitters=completed),
        bench.kuberay_model(ends, t0, cost, events=True, client_limit=False, submitters=completed),
    ]
    sides = [ours, *models]
    width = max(len(f.name) for f in sides) + 2
    fmt = bench._fmt
    rows = [
        ("delay p50 (s)", [fmt(f.percentile(0.5), 3) for f in sides]),
        ("delay p95 (s)", [fmt(f.percentile(0.95), 3) for f in sides]),
        ("delay max (s)", [fmt(f.percentile(1.0), 3) for f in sides]),
        ("not published", [str(f.missing) for f in sides]),
        ("dashboard req / job-hour", [fmt(f.dashboard_per_job_hour, 0) for f in sides]),
        ("kubernetes req / job-hour", [fmt(f.kube_per_job_hour, 0) for f in sides]),
        ("writes / finished job", [fmt(bench._writes_per_finished(f), 2) for f in sides]),
    ]
    return [
        f"real control plane: {scale.jobs} RayJobs (K8sJobMode) end {scale.lead_s:.0f}-"
        f"{scale.lead_s + scale.spread_s:.0f} s into the window; a GET costs "
        f"{cost * 1000:.2f} ms (median); syncer peak RSS {rss:.0f} MB (with its dashboards)",
        f"{'':26}" + "".join(f"{f.name:>{width}}" for f in sides),
        *(f"{label:26}" + "".join(f"{v:>{width}}" for v in values) for label, values in rows),
        f"writes in the window: {dict(sorted((k, v) for k, v in verbs.items() if v))}",
        f"where the delay goes (p50 / p95, polled every 0.2 s): end -> submitter pod "
        f"Succeeded {_lag(watch.pod_done, ends)} (test kubelet); -> Job Complete "
        f"{_lag(watch.job_done, ends)} (Job controller); Job Complete -> status published "
        f"{_lag(recording.finished, watch.job_done)} (syncer)",
    ]


def main(
    jobs: int, lead: float | None, spread: float | None, budget: float, write_qps: float
) -> None:
    """One real-control-plane run at `jobs` (ends over 10 s, 5 s after the window opens)."""
    burst = int(2 * write_qps)
    scale = bench.Scale(jobs, 5.0, 10.0, budget, write_qps=write_qps, write_burst=burst)
    if lead is not None:
        scale = replace(scale, lead_s=lead)
    if spread is not None:
        scale = replace(scale, spread_s=spread)
    for line in run_real(scale, say=lambda text: print(f"syncer-real: {text}", flush=True)):
        print(f"syncer-real: {line}", flush=True)
