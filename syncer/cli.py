"""`kuberay-syncer`: wire config, Kubernetes access, leader election, the engine and endpoints.

Signals set the stop event; on stop the workers and informers end, the Lease is
released (so another replica takes over at once) and the HTTP endpoints close.
"""

from __future__ import annotations

import base64
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from types import FrameType

import click

from syncer import metrics
from syncer.config import Config, ConfigError, load_config
from syncer.ray.dashboard import Dashboard, HttpDashboard
from syncer.errors import SyncerError
from syncer.httpserver import HealthServer, MetricsServer
from syncer.kube.client import SECRETS, KubeClient
from syncer.kube.leader import AlwaysLeader, GuardedKube, LeaderElector
from syncer.logs import setup_logging
from syncer.engine import Options, Syncer
from syncer.rayjob.machine import Settings
from syncer.reload import ConfigWatcher
from syncer.rayservice.reconciler import ServingController

_LOG = logging.getLogger("kuberay-syncer")
VERSION = "0.1.0"


def options_from(config: Config, own_namespace: str) -> Options:
    """The engine's options from the config file."""
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
        settings=Settings(
            submitter_finished_timeout_s=config.submitter_finished_timeout_s,
            transition_grace_period_s=config.transition_grace_period_s,
            status_check_timeout_s=config.status_check_timeout_s,
            poll_interval_s=config.poll_interval_s,
        ),
    )


def _auth_token(kube: KubeClient, config: Config, namespace: str) -> str | None:
    if not config.dashboard_auth_secret:
        return None
    secret = kube.get(SECRETS, namespace, config.dashboard_auth_secret)
    if secret is None:
        raise click.ClickException(
            f"the dashboard auth Secret {namespace}/{config.dashboard_auth_secret} does not exist"
        )
    data = (secret.get("data") or {}).get("auth_token")
    if not data:
        raise click.ClickException(f"Secret {config.dashboard_auth_secret} has no key auth_token")
    return base64.b64decode(data).decode().strip()


def _dashboards(config: Config, token: str | None) -> Callable[[str], Dashboard]:
    def make(url: str) -> Dashboard:
        return HttpDashboard(url, timeout=config.dashboard_timeout_s, auth_token=token)

    return make


class _MetricsPublisher:
    """Copies the engine's counters into the Prometheus registry every few seconds."""

    def __init__(self, syncer: Syncer, leader: LeaderElector | AlwaysLeader) -> None:
        self._syncer = syncer
        self._leader = leader
        self._sent: dict[tuple[str, ...], int] = {}

    def _add(self, key: tuple[str, ...], total: int, inc: Callable[[int], None]) -> None:
        delta = total - self._sent.get(key, 0)
        if delta > 0:
            inc(delta)
            self._sent[key] = total

    def publish(self) -> None:
        """One copy of the current figures."""
        syncer = self._syncer
        metrics.LEADER.labels().set(1 if self._leader.is_leader else 0)
        metrics.QUEUE_DEPTH.labels().set(len(syncer.queue))
        states, transitions = syncer.snapshot()
        metrics.JOB_STATE.clear()
        kinds: dict[str, int] = {}
        for (kind, namespace, name), state in states.items():
            kinds[kind] = kinds.get(kind, 0) + 1
            if kind == "RayJob":
                metrics.JOB_STATE.labels(
                    namespace=namespace, name=name, job_deployment_status=state or "New"
                ).set(1)
        for kind, count in kinds.items():
            metrics.TRACKED_OBJECTS.labels(kind=kind).set(count)
        for (before, after), count in transitions.items():
            child = metrics.TRANSITIONS.labels(
                namespace="*", kind="RayJob", **{"from": before or "New", "to": after}
            )
            self._add(("t", before, after), count, child.inc)
        for call, count in syncer.dashboards.requests.items():
            child = metrics.API_REQUESTS.labels(target="dashboard", verb=call, code="any")
            self._add(("d", call), count, child.inc)


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
@click.version_option(VERSION)
def main(
    config_path: str | None,
    kubeconfig: str | None,
    namespace: str | None,
    identity: str | None,
    no_leader_elect: bool,
) -> None:
    """Run the kuberay-syncer daemon."""
    serve(config_path, kubeconfig, namespace, identity, no_leader_elect)


def serve(
    config_path: str | None,
    kubeconfig: str | None,
    namespace: str | None,
    identity: str | None,
    no_leader_elect: bool,
    *,
    dashboards: Callable[[str], Dashboard] | None = None,
) -> None:
    """Run the daemon until SIGTERM/SIGINT; `dashboards` replaces the HTTP dashboard factory."""
    try:
        config = load_config(config_path) if config_path else Config()
    except ConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
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
    try:
        token = _auth_token(kube, config, own_namespace)
    except SyncerError as exc:
        raise click.ClickException(f"cannot read the dashboard auth Secret: {exc}") from exc

    syncer_ref: list[Syncer] = []

    def on_leadership(leading: bool) -> None:
        metrics.LEADER.labels().set(1 if leading else 0)
        if leading and syncer_ref:
            syncer_ref[0].enqueue_all()

    leader: LeaderElector | AlwaysLeader
    if no_leader_elect or not config.leader_election.enabled:
        leader = AlwaysLeader()
    else:
        election = config.leader_election
        leader = LeaderElector(
            kube,
            config.lease_namespace(own_namespace),
            election.lease_name,
            identity,
            lease_duration_s=election.lease_duration_s,
            renew_deadline_s=election.renew_deadline_s,
            retry_period_s=election.retry_period_s,
            on_change=on_leadership,
        )
    engine = Syncer(
        GuardedKube(kube, leader),
        options_from(config, own_namespace),
        dashboards=dashboards or _dashboards(config, token),
        is_leader=leader.is_fresh,
    )
    syncer_ref.append(engine)
    _register_extensions(engine)
    metrics.BUILD_INFO.labels(version=VERSION).set(1)

    def apply(new: Config) -> None:
        # The watcher logs the reload, counts it and names fields that need a restart.
        nonlocal config
        fresh = options_from(new, own_namespace)
        engine.options.poll_interval_s = fresh.poll_interval_s
        engine.options.idle_resync_s = fresh.idle_resync_s
        engine.options.ttl_mode = fresh.ttl_mode
        engine.options.settings = fresh.settings
        config = new

    watcher = ConfigWatcher(config_path, config, apply, logger=_LOG) if config_path else None
    health = HealthServer(
        config.bind_address,
        config.health_port,
        healthz=lambda: not stop.is_set(),
        readyz=lambda: all(i.synced for i in engine.informers()),
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
        ",".join(str(n or "*") for n in engine.options.namespaces),
        health.port,
        served.port,
    )
    publisher = _MetricsPublisher(engine, leader)
    if engine.start(stop):
        while not stop.wait(5.0):
            publisher.publish()
    engine.stop()
    if election_thread is not None:
        election_thread.join(10.0)  # leader.run releases the Lease on its way out
    if watcher is not None:
        watcher.stop()
    served.stop()
    health.stop()
    kube.close()
    _LOG.info("stopped")


def _register_extensions(engine: Syncer) -> None:
    """Add the RayService reconciler beside the RayJob one."""
    ServingController(engine)
