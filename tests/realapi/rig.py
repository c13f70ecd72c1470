"""The syncer daemon of the realapi tests: installed as rendered, run under its own token.

`running_syncer` applies what `kuberay syncer-manifests` renders (ServiceAccount, Roles,
RoleBindings, config) in a namespace of its own, mints the ServiceAccount's token through
the TokenRequest API and runs the `kuberay-syncer` daemon (`SyncerProcess`) with only that
token; the `rig` fixture (conftest.py) does so for a test's namespace. `Rig` holds
the helpers the tests share: rendering, GitOps-like apply, status reads, the `forbidden`
log check and `diagnosis`, which a timed-out wait prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.e2e.rayhead import RayHead
from tests.realapi.conftest import Real
from tests.realapi.gitops import apply_all, render, syncer_manifests
from tests.realapi.rest import Manifest, Rest
from tests.realapi.syncerd import SyncerProcess

_SERVICE_ADDRESS: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\.[a-z0-9-]+\.svc\.cluster\.local:\d+"
)
_FORBIDDEN: Final = re.compile(r"\b403\b|forbidden", re.IGNORECASE)
JOB_TIMEOUT_S: Final = float(os.environ.get("REALAPI_JOB_TIMEOUT_S", "180"))
# How many of the syncer's log records a diagnosis shows.
DIAGNOSIS_RECORDS: Final = 60


def wait_until(probe: Callable[[], Any], what: str, timeout: float = JOB_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


@dataclass
class Rig:
    real: Real
    syncer: SyncerProcess
    sa_rest: Rest
    system_namespace: str
    head: RayHead | None = None
    config: Manifest = field(default_factory=dict)

    @property
    def rest(self) -> Rest:
        return self.real.rest

    @property
    def namespace(self) -> str:
        return self.real.namespace

    def render(self, manifest: str) -> list[Manifest]:
        return render(manifest, self.namespace)

    def apply(self, objects: list[Manifest], **kwargs: Any) -> None:
        failures = apply_all(self.rest, objects, namespace=self.namespace, **kwargs)
        assert not failures, failures

    def pod(self, name: str) -> Manifest:
        return self.rest.get("v1", "Pod", self.namespace, name)

    def job_pods(self, job: str) -> list[Manifest]:
        return self.rest.list("v1", "Pod", self.namespace, labelSelector=f"job-name={job}")

    def status(self, name: str) -> Manifest:
        cm = self.rest.get_or_none("v1", "ConfigMap", self.namespace, f"{name}-kuberay-status")
        if cm is None:
            return {}
        status: Manifest = json.loads(cm["data"]["status.json"])["status"]
        return status

    def wait_status(self, name: str, deployment: str) -> Manifest:
        def probe() -> Manifest | None:
            status = self.status(name)
            return status if status.get("jobDeploymentStatus") == deployment else None

        try:
            found: Manifest = wait_until(probe, f"{name} {deployment}")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; status now {self.status(name)}\n{self.diagnosis()}"
            ) from None
        return found

    def diagnosis(self) -> str:
        """Pods, their processes' output, kubelet errors and the syncer's log."""
        lines = []
        for pod in self.rest.list("v1", "Pod", self.namespace):
            meta, status = pod["metadata"], pod.get("status") or {}
            ready = condition(pod, "Ready") or {}
            lines.append(
                f"pod {meta['name']}: node={pod['spec'].get('nodeName')} "
                f"gates={gates(pod)} phase={status.get('phase')} ready={ready.get('status')} "
                f"rv={meta.get('resourceVersion')} "
                f"annotations={sorted(meta.get('annotations') or {})}"
            )
            output = self.real.kubelet.log_of(self.namespace, meta["name"])
            if output:
                lines.append(f"  output: {output[-1500:]}")
        kubelet = self.real.kubelet
        if self.head is not None:
            lines.append(f"ray head {self.head.dashboard_url} alive={self.head.alive}")
        lines.append(f"kubelet alive={kubelet.alive} errors: {kubelet.errors[-5:]}")
        lines.append("kubelet journal:\n  " + "\n  ".join(kubelet.journal_of(self.namespace)))
        scheduler = self.real.plane.log_lines("kube-scheduler", self.namespace)
        lines.append("scheduler log:\n  " + "\n  ".join(scheduler[-30:]))
        records = self.syncer.records()
        lines.append(
            f"syncer log: last {min(len(records), DIAGNOSIS_RECORDS)} of {len(records)} "
            f"records (time removed):"
        )
        lines.extend(f"  {text}" for text in log_records(records)[-DIAGNOSIS_RECORDS:])
        lines.append(f"syncer threads:\n{self.syncer.thread_dump()}")
        return "\n".join(lines)

    def forbidden(self) -> list[str]:
        """The syncer's log lines that mention a 403 or Forbidden (timestamps aside)."""
        return [text for text in log_lines(self.syncer.log_text()) if _FORBIDDEN.search(text)]


def log_records(records: list[Manifest]) -> list[str]:
    """JSON log records as one-line JSON without their `time` (stable, easy to compare)."""
    return [json.dumps({k: v for k, v in r.items() if k != "time"}) for r in records]


def log_lines(text: str) -> list[str]:
    """Every line of a log: JSON records without `time`, other lines (tracebacks) as they are."""
    found = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            found.append(line)
            continue
        found.extend(log_records([record]) if isinstance(record, dict) else [line])
    return found


def intent_of(objects: list[Manifest]) -> Manifest:
    cm = next(o for o in objects if o["metadata"]["name"].endswith("-kuberay-intent"))
    data: Manifest = json.loads(next(iter(cm["data"].values())))
    return data


def token_for(rest: Rest, namespace: str, account: str) -> str:
    """A token of `account`, from the TokenRequest API."""
    answer = rest.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    return str(answer["status"]["token"])


def install_syncer(real: Real, system: str, *extra: str) -> tuple[list[Manifest], Manifest]:
    """Apply what `kuberay syncer-manifests` renders; returns the objects and the config."""
    real.namespace_object(system)
    objects = syncer_manifests(system, real.namespace, "--replicas", "0", *extra)
    failures = apply_all(real.rest, objects, namespace=system)
    assert not failures, failures
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    config: Manifest = json.loads(cm["data"]["config.yaml"])
    return objects, config


def submitter_rewrite(head_address: str) -> Callable[..., tuple[list[str], dict[str, str]] | None]:
    """Run submitter pods (owned by a Job) for real, with the head Service resolved."""
    bin_dir = str(Path(sys.executable).parent)

    def rewrite(
        pod: Manifest, found: tuple[list[str], dict[str, str]]
    ) -> tuple[list[str], dict[str, str]] | None:
        owners = pod["metadata"].get("ownerReferences") or []
        if not any(o.get("kind") == "Job" for o in owners):
            return None
        argv, env = found
        argv = [_SERVICE_ADDRESS.sub(head_address, a) for a in argv]
        env = {k: _SERVICE_ADDRESS.sub(head_address, v) for k, v in env.items()}
        full = {
            **os.environ,
            **env,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
        return argv, full

    return rewrite


@contextlib.contextmanager
def running_syncer(real: Real, ray_head: RayHead, tmp_path: Path, *extra: str) -> Iterator[Rig]:
    """Install the rendered syncer (`kuberay syncer-manifests ... *extra`) in a namespace
    of its own and run the daemon under its ServiceAccount's token; removed afterwards."""
    system = f"{real.namespace}-sys"
    _, config = install_syncer(real, system, *extra)
    config["poll_interval_s"] = 0.5
    token = token_for(real.rest, system, "kuberay-syncer")
    kubeconfig = real.plane.kubeconfig_for(tmp_path / "syncer.kubeconfig", token, system)
    sa_rest = Rest(real.plane.server, token, ca=real.plane.ca)
    syncer = SyncerProcess.start(
        config=config,
        kubeconfig=kubeconfig,
        namespace=system,
        dashboard_url=ray_head.dashboard_url,
        workdir=tmp_path / "syncer",
    )
    try:
        syncer.wait_ready()
        yield Rig(real, syncer, sa_rest, system, ray_head, config)
    finally:
        syncer.stop()
        real.rest.delete(f"/api/v1/namespaces/{system}")


def gates(pod: Manifest) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def condition(pod: Manifest, kind: str) -> Manifest | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition["type"] == kind:
            return dict(condition)
    return None
