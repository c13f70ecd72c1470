"""`kuberay-syncer`: wire config, Kubernetes access, leader election, the engine and endpoints.

`Syncer` assembles the daemon (the engine, the dashboard pool, the shared pod cache, one
reconciler per kind, registered here); `serve` runs it under leader election with the
health and metrics endpoints and the config watcher.

Signals set the stop event; on stop the workers and informers end, the Lease is
released (so another replica takes over at once) and the HTTP endpoints close.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType

import click

from renderer import naming
from syncer import dashboards as dashboard_clients
from syncer import engine, memory, metrics
from syncer.autoscaler import pods as autoscaler_pods
from syncer.autoscaler import reconciler as autoscaler_reconciler
from syncer.config import Config, ConfigError, load_config
from syncer.httpserver import HealthServer, MetricsServer
from syncer.kube.cache import Cache
from syncer.kube.client import PODS, SERVICES, Kube, KubeClient
from syncer.kube.informer import Informer
from syncer.kube.leader import AlwaysLeader, GuardedKube, LeaderElector
from syncer.kube.ratelimit import TokenBucket
from syncer.logs import set_level, setup_logging
from syncer.ray.pool import DashboardPool
from syncer.ray.types import Dashboard
from syncer.raycluster import reconciler as raycluster_reconciler
from syncer.raycluster import views as raycluster_views
from syncer.rayjob import machine as rayjob_machine
from syncer.rayjob import reconciler as rayjob_reconciler
from syncer.rayjob import views as rayjob_views
from syncer.rayservice import reconciler as rayservice_reconciler
from syncer.rayservice import state as rayservice_state
from syncer.reload import ConfigWatcher

_LOG = logging.getLogger("kuberay-syncer")
VERSION = "0.1.0"


@dataclass(frozen=True, slots=True)
class Options:
    """What the daemon's parts take from the config file (swapped whole on a reload)."""

    namespaces: Sequence[str | None] = (None,)
    label_selector: str = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}"
    poll_interval_s: float = 3.0
    idle_resync_s: float = 300.0
    dashboard_budget_rps: float = 200.0
    workers: int = 8
    ttl_mode: str = "stop"
    work_queue_limit: int = 100_000
    cluster_domain: str = "cluster.local"
    settings: rayjob_machine.Settings = field(default_factory=rayjob_machine.Settings)
    dashboard: dashboard_clients.Settings = field(default_factory=dashboard_clients.Settings)
    raycluster: raycluster_reconciler.Options = field(default_factory=raycluster_reconciler.Options)

    def for_engine(self) -> engine.Options:
        """The engine's share."""
        return engine.Options(
            namespaces=self.namespaces,
            label_selector=self.label_selector,
            idle_resync_s=self.idle_resync_s,
            workers=self.workers,
            work_queue_limit=self.work_queue_limit,
        )

    def for_rayjob(self) -> rayjob_reconciler.Options:
        """The RayJob reconciler's share."""
        return rayjob_reconciler.Options(
            poll_interval_s=self.poll_interval_s,
            dashboard_budget_rps=self.dashboard_budget_rps,
            ttl_mode=self.ttl_mode,
            cluster_domain=self.cluster_domain,
            settings=self.settings,
        )


class Syncer:
    """The daemon assembled: engine, dashboard pool, the shared pod cache, the reconcilers.

    Each reconciler is built here and registered with the engine; a later kind (the
    autoscaling actuator, the RayCluster status reconciler) is one more package beside
    `syncer/rayjob/` and `syncer/rayservice/` and one more `register` call below.
    """

    def __init__(
        self,
        kube: Kube,
        options: Options,
        *,
        dashboards: Callable[[str], Dashboard] | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        service_settings: rayservice_state.Settings | None = None,
    ) -> None:
        """Assemble the parts; `dashboards` replaces the daemon's own HTTP clients.

        Without it the clients are `syncer.dashboards`': live Service port, per-namespace
        token, circuit breakers, the lease fence.
        """
        self.options = options
        # One pod cache for every kind (a RayJob's cluster pods, a RayService's generations,
        # an autoscaled cluster's head and the dynamic workers the actuator made).
        self.pods = Cache.watching(
            kube,
            PODS,
            options.namespaces,
            label_selector=pod_selector(options.label_selector),
            project=dashboard_clients.keeping_auth_secret(rayjob_views.cached_pod),
        )
        self.pods.add_index(dashboard_clients.HEADS_INDEX, dashboard_clients.heads)
        # One Services cache too: the dashboard clients dial the live head Service's port
        # (C2), the RayCluster status reads its clusterIP, ports and shape. Both read only
        # a Ray cluster's own Services (`ray.io/cluster`), not a RayJob's or RayService's
        # stable ones: half the Services of ten thousand RayJobs.
        self.services = Cache.watching(
            kube,
            SERVICES,
            options.namespaces,
            label_selector=service_selector(options.label_selector),
            project=raycluster_views.cached_service,
        )
        self.http: dashboard_clients.DashboardFactory | None = None
        if dashboards is None:
            self.http = dashboard_clients.DashboardFactory(
                kube, self.services, self.pods, options.dashboard, fence=is_leader
            )
            dashboards = self.http
        self.dashboards = DashboardPool(dashboards, budget_rps=options.dashboard_budget_rps)
        self.engine = engine.Engine(
            kube,
            options.for_engine(),
            is_leader=is_leader,
            clock=clock,
            monotonic=self.dashboards.now,
            event_memory_s=2 * self.dashboards.max_age_s,
        )
        self.pods.add_handler(self.engine.route_owned)
        self.rayjob = rayjob_reconciler.RayJobReconciler(
            self.engine, self.dashboards, self.pods, options.for_rayjob()
        )
        self.rayservice = rayservice_reconciler.RayServiceReconciler(
            self.engine,
            self.dashboards,
            self.pods,
            service_settings or rayservice_state.Settings(poll_s=min(2.0, options.poll_interval_s)),
            cluster_domain=options.cluster_domain,
        )
        self.raycluster = raycluster_reconciler.RayClusterReconciler(
            self.engine, self.pods, self.services, options.raycluster
        )
        self.autoscaler = autoscaler_reconciler.AutoscalerReconciler(self.engine, self.pods)
        self.engine.register(self.rayjob)
        self.engine.register(self.rayservice)
        self.engine.register(self.raycluster)
        self.engine.register(self.autoscaler)

    def enqueue_all(self) -> None:
        """Queue every known key now (leadership gained): intents' and `key_sources`'."""
        self.engine.enqueue_all()

    def reconfigure(self, options: Options) -> None:
        """Apply a reloaded config: each part swaps in its new share (no field is mutated)."""
        self.options = options
        self.engine.reconfigure(options.for_engine())
        self.rayjob.reconfigure(options.for_rayjob())

    def informers(self) -> list[Informer]:
        """Every informer: the engine's (the Services cache is the RayCluster reconciler's)."""
        return self.engine.informers()

    def start_informers(self, timeout: float = 60.0) -> bool:
        """Start every cache and wait for the first lists (tests that drive passes)."""
        return self.engine.start_informers(timeout)

    def start(self, stop: threading.Event | None = None) -> bool:
        """Start caches, then workers and the resync (see `Engine.start`).

        No pass runs before every cache, the head Services' included, has its first list:
        a pass dials only a Service it has cached.
        """
        metrics.BUILD_INFO.labels(version=VERSION).set(1)
        return self.engine.start(stop)

    def stop(self) -> None:
        """Stop workers and caches."""
        self.engine.stop()

    def healthy(self) -> bool:
        """Liveness (H2): every informer and engine thread alive, no watch stalled."""
        return self.engine.healthy()

    def drain(self, limit: int = 10_000) -> int:
        """Process queued keys until none is due now (tests)."""
        return self.engine.drain(limit)


def service_selector(selector: str) -> str:
    """The Services cache's selector: `selector`, and a `ray.io/cluster` label."""
    return f"{selector},{naming.RAY_CLUSTER}" if selector else naming.RAY_CLUSTER


def pod_selector(selector: str) -> str:
    """The pod cache's selector: `selector`, widened to the actuator's dynamic workers.

    The renderer's `managed-by` requirement becomes `managed-by in (kuberay-render,
    kuberay-syncer)`; the selector's other requirements still hold (dynamic workers carry
    their template's labels). A selector without that exact requirement is kept as it is.
    """
    rendered = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}"
    either = (
        f"{naming.MANAGED_BY} in ({naming.MANAGED_BY_VALUE},{autoscaler_pods.MANAGED_BY_SYNCER})"
    )
    terms = [term.strip() for term in selector.split(",")]
    if rendered not in terms:
        return selector
    return ",".join(either if term == rendered else term for term in terms)


def options_from(config: Config, own_namespace: str) -> Options:
    """The daemon's options from the config file."""
    watched = config.watched_namespaces(own_namespace)
    return Options(
        namespaces=(None,) if watched is None else tuple(watched),
        label_selector=config.label_selector,
        poll_interval_s=config.poll_interval_s,
        idle_resync_s=config.idle_resync_s,
        dashboard_budget_rps=config.dashboard_budget_rps,
        workers=config.dashboard_concurrency,
        ttl_mode=config.ttl_mode,
        work_queue_limit=config.work_queue_limit,
        cluster_domain=config.cluster_domain,
        dashboard=dashboard_clients.Settings(
            timeout_s=config.dashboard_timeout_s,
            auth_secret=config.dashboard_auth_secret,
            cluster_domain=config.cluster_domain,
        ),
        settings=rayjob_machine.Settings(
            submitter_finished_timeout_s=config.submitter_finished_timeout_s,
            transition_grace_period_s=config.transition_grace_period_s,
            status_check_timeout_s=config.status_check_timeout_s,
            poll_interval_s=config.poll_interval_s,
        ),
    )


def reloaded_options(started: Options, new: Config, own_namespace: str) -> Options:
    """What a reload applies: the fields of `config.APPLIED_FIELDS`, the rest as started.

    Fields that need a restart (namespaces, selector, workers, ...: `RESTART_FIELDS`)
    keep what the process started with; the config watcher names them in its warning.
    """
    fresh = options_from(new, own_namespace)
    return dataclasses.replace(
        started,
        poll_interval_s=fresh.poll_interval_s,
        idle_resync_s=fresh.idle_resync_s,
        ttl_mode=fresh.ttl_mode,
        settings=fresh.settings,
    )


class _MetricsPublisher:
    """Samples the daemon-wide gauges every few seconds (each reconciler writes its own)."""

    def __init__(
        self, syncer: Syncer, leader: LeaderElector | AlwaysLeader, kube: KubeClient | None
    ) -> None:
        self._syncer = syncer
        self._leader = leader
        self._kube = kube
        self._sent: dict[tuple[str, ...], int] = {}

    def _add(self, key: tuple[str, str, str], total: int) -> None:
        delta = total - self._sent.get(key, 0)
        if delta > 0:
            metrics.API_REQUESTS.labels(*key).inc(delta)
            self._sent[key] = total

    def publish(self) -> None:
        """One sample of leadership, queue depth, tracked objects and API requests."""
        syncer = self._syncer
        metrics.LEADER.labels().set(1 if self._leader.is_leader else 0)
        metrics.QUEUE_DEPTH.labels().set(len(syncer.engine.queue))
        tracked = syncer.engine.tracked()
        for kind in syncer.engine.kinds():
            metrics.TRACKED_OBJECTS.labels(kind=kind).set(tracked.get(kind, 0))
        for call, count in list(syncer.dashboards.requests.items()):
            self._add(("dashboard", call, "any"), count)
        if self._kube is not None:
            for (verb, code), count in list(self._kube.calls.items()):
                self._add(("kube", verb, code), count)


@click.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The syncer config file (YAML); reloaded when it changes.",
)
@click.option("--kubeconfig", default=None, help="A kubeconfig file (default: in-cluster).")
@click.option(
    "--namespace",
    default=None,
    help="The syncer's own namespace (default: $POD_NAMESPACE, else default).",
)
@click.option(
    "--identity",
    default=None,
    help="Leader-election identity (default: $POD_NAME, else host name and PID).",
)
@click.option("--no-leader-elect", is_flag=True, help="Run without a Lease (a single replica).")
@click.option(
    "--bind-address",
    default=None,
    help="The address the health and metrics endpoints listen on (overrides bind_address).",
)
@click.version_option(VERSION)
def main(
    config_path: str | None,
    kubeconfig: str | None,
    namespace: str | None,
    identity: str | None,
    no_leader_elect: bool,
    bind_address: str | None,
) -> None:
    """Run the kuberay-syncer daemon."""
    serve(config_path, kubeconfig, namespace, identity, no_leader_elect, bind_address=bind_address)


def _leader(
    kube: KubeClient,
    config: Config,
    own_namespace: str,
    identity: str,
    no_leader_elect: bool,
    *,
    on_change: Callable[[bool], None],
) -> LeaderElector | AlwaysLeader:
    """The Lease elector the config asks for, or AlwaysLeader without election."""
    if no_leader_elect or not config.leader_election.enabled:
        return AlwaysLeader()
    election = config.leader_election
    # Both requests of one renewal must end within the renew deadline (review M5).
    lease_kube = kube.with_timeout(min(10.0, election.renew_deadline_s / 2))
    return LeaderElector(
        lease_kube,
        config.lease_namespace(own_namespace),
        election.lease_name,
        identity,
        lease_duration_s=election.lease_duration_s,
        renew_deadline_s=election.renew_deadline_s,
        retry_period_s=election.retry_period_s,
        on_change=on_change,
    )


def _load(config_path: str | None, bind_address: str | None) -> Config:
    """The config file (exit 2 with every problem when it is bad), `--bind-address` applied."""
    try:
        config = load_config(config_path) if config_path else Config()
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    if bind_address is not None:
        try:
            ipaddress.ip_address(bind_address)
        except ValueError:
            click.echo(f"--bind-address: expected an IP address, got {bind_address!r}", err=True)
            sys.exit(2)
        config = dataclasses.replace(config, bind_address=bind_address)
    return config


def serve(
    config_path: str | None,
    kubeconfig: str | None,
    namespace: str | None,
    identity: str | None,
    no_leader_elect: bool,
    *,
    dashboards: Callable[[str], Dashboard] | None = None,
    bind_address: str | None = None,
) -> None:
    """Run the daemon until SIGTERM/SIGINT; `dashboards` replaces the HTTP dashboard factory."""
    memory.limit_malloc_arenas()  # before any thread of the daemon starts
    config = _load(config_path, bind_address)
    setup_logging(config.log_level)
    own_namespace = namespace or os.environ.get("POD_NAMESPACE") or "default"
    identity = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    kube = KubeClient.from_environment(kubeconfig, user_agent=f"kuberay-syncer/{identity}")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        _LOG.info("stopping signal=%s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    syncer_ref: list[Syncer] = []

    def on_leadership(leading: bool) -> None:
        metrics.LEADER.labels().set(1 if leading else 0)
        if leading and syncer_ref:
            syncer_ref[0].enqueue_all()

    leader = _leader(
        kube, config, own_namespace, identity, no_leader_elect, on_change=on_leadership
    )
    started = options_from(config, own_namespace)
    writes = TokenBucket(config.api_write_qps, config.api_write_burst)
    syncer = Syncer(
        GuardedKube(kube, leader, bucket=writes),
        started,
        dashboards=dashboards,
        is_leader=leader.is_fresh,
    )
    syncer_ref.append(syncer)

    def apply(new: Config) -> None:
        # Runs on the watcher's thread: the parts swap in new frozen options, so a pass
        # sees the old or the new values, never a mix within one part.
        nonlocal config
        syncer.reconfigure(reloaded_options(started, new, own_namespace))
        set_level(new.log_level)
        config = new

    watcher = ConfigWatcher(config_path, config, apply, logger=_LOG) if config_path else None
    health = HealthServer(
        config.bind_address,
        config.health_port,
        healthz=lambda: (
            not stop.is_set()
            and syncer.healthy()
            and (isinstance(leader, AlwaysLeader) or leader.healthy())
        ),
        readyz=lambda: all(i.synced for i in syncer.informers()),
    )
    served = MetricsServer(config.bind_address, config.metrics_port, metrics.REGISTRY)
    health.start()
    served.start()
    if watcher is not None:
        watcher.start()
    election_thread = None
    if isinstance(leader, LeaderElector):
        election_thread = threading.Thread(
            target=leader.run, args=(stop,), name="leader", daemon=True
        )
        election_thread.start()
    _LOG.info(
        "started identity=%s namespaces=%s health_port=%s metrics_port=%s",
        identity,
        ",".join(str(n or "*") for n in syncer.options.namespaces),
        health.port,
        served.port,
    )
    publisher = _MetricsPublisher(syncer, leader, kube)
    if syncer.start(stop):
        while not stop.wait(5.0):
            publisher.publish()
    syncer.stop()
    if election_thread is not None:
        election_thread.join(10.0)  # leader.run releases the Lease on its way out
    if watcher is not None:
        watcher.stop()
    served.stop()
    health.stop()
    kube.close()
    _LOG.info("stopped")
