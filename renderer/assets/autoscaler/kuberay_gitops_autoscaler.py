"""Ray's `external` node provider for kuberay-gitops: the autoscaler's only door to Kubernetes.

Shipped by `kuberay render` in the `<cluster>-autoscaling` ConfigMap and loaded by Ray's
autoscaler (v2, through `NodeProviderAdapter`) as `kuberay_gitops_autoscaler.PodProvider`.
It runs inside the Ray image, so it uses the standard library only and Python >= 3.9.

What it does (reference/autoscaling.md section 5.3):
- lists the cluster's Pods by `ray.io/cluster=<cluster>`: the head (kind head, type
  `headgroup`) and the workers; reads the desired set, the ConfigMap
  `<cluster>-autoscaler-state` (one key per desired worker Pod name, value
  `{"group": ..., "request": ...}`), which the syncer created and which git does not declare;
- `create_node(count)` invents `count` names in KubeRay's generateName shape and adds them
  with ONE JSON merge patch of new keys (conflict-free under concurrent callers, no
  read-modify-write); the names are pending nodes at once;
- `terminate_nodes(ids)` merge-patches `{id: null}`;
- a dead Pod (phase Failed/Succeeded, or its Ray container terminated under
  `restartPolicy: Never`) is reported terminated and its key removed.

It never creates, patches or deletes a Pod: the syncer does that from the git-declared
template. API access is in-cluster (service-account token and CA); the environment variable
`KUBERAY_GITOPS_API_URL` overrides the address (tests point it at a plain-HTTP fake).
Every method is thread-safe: the autoscaler calls them from several threads.
"""

from __future__ import annotations

import json
import logging
import os
import random
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

try:  # the Ray image always has it; the import is optional so the file can be read alone
    from ray.autoscaler.node_provider import NodeProvider
except ImportError:  # pragma: no cover - only without Ray

    class NodeProvider:  # type: ignore[no-redef]
        """Stand-in base when Ray is not importable (reading the file, tests of the file)."""

        def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
            self.provider_config = provider_config
            self.cluster_name = cluster_name


logger = logging.getLogger(__name__)

API_URL_ENV = "KUBERAY_GITOPS_API_URL"
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MERGE_PATCH = "application/merge-patch+json"
USER_AGENT = "kuberay-gitops-autoscaler"
HEAD_TYPE = "headgroup"
# Ray's tag names (ray.autoscaler.tags), spelled out so the file needs nothing else.
TAG_NODE_KIND = "ray-node-type"
TAG_USER_NODE_TYPE = "ray-user-node-type"
TAG_LAUNCH_REQUEST = "ray-launch-request"
TAG_NODE_NAME = "ray-node-name"
TAG_NODE_STATUS = "ray-node-status"
KIND_HEAD = "head"
KIND_WORKER = "worker"
STATUS_UP_TO_DATE = "up-to-date"
# KubeRay's generateName alphabet (k8s.io/apiserver's SimpleNameGenerator).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
NAME_RANDOM = 5
NAME_LIMIT = 63
REQUEST_TIMEOUT_S = 10.0
RETRIES = 3  # per call, for 429, 5xx and refused connections
RETRY_BASE_S = 0.2
MAX_NAMES_PER_CALL = 1000  # a count above this is a bug in the caller, not a scale-up


class KubeApiError(Exception):
    """A Kubernetes API call failed; `status` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def worker_name(cluster: str, group: str, rng: random.Random) -> str:
    """`<cluster>-<group>-worker-<5 random chars>`, fitted to 63 characters.

    The prefix is cut like `renderer.naming` cuts worker names (50 characters, then to fit),
    so a dynamic name never equals a rendered one (`<c>-<g>-worker-<hash>-<index>` has one
    more segment).
    """
    prefix = f"{cluster}-{group}"[:50].lower()
    suffix = "-worker-" + "".join(rng.choice(NAME_ALPHABET) for _ in range(NAME_RANDOM))
    return prefix[: NAME_LIMIT - len(suffix)].rstrip("-.") + suffix


def pod_is_dead(pod: dict[str, Any]) -> bool:
    """KubeRay's `shouldDeletePod`: Failed/Succeeded, or the Ray container ended under Never."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        return True
    spec = pod.get("spec") or {}
    if spec.get("restartPolicy") != "Never":
        return False
    containers = spec.get("containers") or []
    if not containers:
        return False
    name = containers[0].get("name")
    for container in status.get("containerStatuses") or []:
        if container.get("name") == name:
            return bool((container.get("state") or {}).get("terminated"))
    return False


def pod_is_running(pod: dict[str, Any]) -> bool:
    """KubeRay's test: the first container status is `running`."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and bool((statuses[0].get("state") or {}).get("running"))


class _Node:
    """What one listing knew of a node (replaced whole, never mutated)."""

    __slots__ = ("ip", "running", "tags")

    def __init__(self, tags: dict[str, str], running: bool, ip: str) -> None:
        self.tags = tags
        self.running = running
        self.ip = ip


class _Api:
    """Just enough of the Kubernetes REST API: GET and merge PATCH in one namespace."""

    def __init__(self, base_url: str | None) -> None:
        self._context: ssl.SSLContext | None = None
        self._token_file: Path | None = None
        if base_url:
            self.base = base_url.rstrip("/")
            if self.base.startswith("https://"):
                self._context = ssl.create_default_context()
        else:
            host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
            port = os.environ.get("KUBERNETES_SERVICE_PORT_HTTPS") or os.environ.get(
                "KUBERNETES_SERVICE_PORT", "443"
            )
            if not host:
                raise KubeApiError(
                    "not in a Kubernetes pod (KUBERNETES_SERVICE_HOST is unset) "
                    f"and {API_URL_ENV} is not set"
                )
            if ":" in host:  # an IPv6 address
                host = f"[{host}]"
            self.base = f"https://{host}:{port}"
            self._context = ssl.create_default_context(cafile=str(SA_DIR / "ca.crt"))
            self._token_file = SA_DIR / "token"

    def _token(self) -> str | None:
        # Read on every call: the kubelet rotates projected tokens.
        if self._token_file is None:
            return None
        return self._token_file.read_text(encoding="utf-8").strip()

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One call, retried on 429/5xx/no answer; the decoded JSON reply."""
        data = None if body is None else json.dumps(body).encode()
        delay = RETRY_BASE_S
        for attempt in range(RETRIES + 1):
            try:
                return self._once(method, path, data)
            except KubeApiError as exc:
                retry = exc.status == 0 or exc.status == 429 or exc.status >= 500
                if not retry or attempt == RETRIES:
                    raise
                logger.warning("kube %s %s failed (%s); retrying", method, path, exc)
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(self, method: str, path: str, data: bytes | None) -> dict[str, Any]:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if data is not None:
            headers["Content-Type"] = MERGE_PATCH
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(
                req, timeout=REQUEST_TIMEOUT_S, context=self._context
            ) as reply:
                text = reply.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            raise KubeApiError(f"HTTP {exc.code}: {detail}", exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise KubeApiError(f"no answer: {exc}") from None
        result = json.loads(text) if text else {}
        if not isinstance(result, dict):
            raise KubeApiError("the API server's reply is not a JSON object", 500)
        return result


class PodProvider(NodeProvider):
    """Ray `NodeProvider` over the cluster's Pods and the desired-set ConfigMap.

    `provider_config` (the rendered `provider:` block): `namespace`, `cluster`
    (default: the autoscaler's cluster name) and `state_configmap` (default
    `<cluster>-autoscaler-state`).
    """

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        self.namespace = str(provider_config["namespace"])
        self.cluster = str(provider_config.get("cluster") or cluster_name)
        self.state_name = str(
            provider_config.get("state_configmap") or f"{self.cluster}-autoscaler-state"
        )
        self._api = _Api(os.environ.get(API_URL_ENV))
        self._lock = threading.Lock()
        self._nodes: dict[str, _Node] = {}
        self._issued: set[str] = set()  # every name this process invented (never reused)
        self._created = 0  # how many create_node calls have patched (orders them and listings)
        self._recent: dict[str, int] = {}  # name -> the `_created` count its patch made
        self._rng = random.SystemRandom()
        ns = urllib.parse.quote(self.namespace, safe="")
        self._pods_path = f"/api/v1/namespaces/{ns}/pods?" + urllib.parse.urlencode(
            {"labelSelector": f"ray.io/cluster={self.cluster}"}
        )
        self._state_path = (
            f"/api/v1/namespaces/{ns}/configmaps/{urllib.parse.quote(self.state_name, safe='')}"
        )

    # --- reading ---------------------------------------------------------------------------

    def _desired(self) -> dict[str, dict[str, str]]:
        """The desired set: pod name -> {"group", "request"}; {} before the syncer made it."""
        try:
            state = self._api.request("GET", self._state_path)
        except KubeApiError as exc:
            if exc.status == 404:
                return {}
            raise
        desired: dict[str, dict[str, str]] = {}
        for name, value in (state.get("data") or {}).items():
            try:
                entry = json.loads(value)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("group"), str):
                desired[name] = {
                    "group": entry["group"],
                    "request": str(entry.get("request") or ""),
                }
        return desired

    def _listing(self) -> dict[str, _Node]:
        """One fresh look: the live head, the desired workers; removes dead ones' names."""
        pods = self._api.request("GET", self._pods_path).get("items") or []
        desired = self._desired()
        nodes: dict[str, _Node] = {}
        dead: list[str] = []
        by_name: dict[str, dict[str, Any]] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            name = str(meta.get("name") or "")
            if not name or meta.get("deletionTimestamp"):
                continue
            by_name[name] = pod
            labels = meta.get("labels") or {}
            if labels.get("ray.io/node-type") == "head" and not pod_is_dead(pod):
                tags = {
                    TAG_NODE_KIND: KIND_HEAD,
                    TAG_USER_NODE_TYPE: HEAD_TYPE,
                    TAG_NODE_NAME: name,
                    TAG_NODE_STATUS: STATUS_UP_TO_DATE,
                }
                ip = str((pod.get("status") or {}).get("podIP") or "")
                nodes[name] = _Node(tags, pod_is_running(pod), ip)
        for name, entry in desired.items():
            pod = by_name.get(name)
            if pod is not None and pod_is_dead(pod):
                dead.append(name)
                continue
            tags = {
                TAG_NODE_KIND: KIND_WORKER,
                TAG_USER_NODE_TYPE: entry["group"],
                TAG_LAUNCH_REQUEST: entry["request"],
                TAG_NODE_NAME: name,
                TAG_NODE_STATUS: STATUS_UP_TO_DATE,
            }
            running = pod is not None and pod_is_running(pod)
            ip = str(((pod or {}).get("status") or {}).get("podIP") or "")
            nodes[name] = _Node(tags, running, ip)
        if dead:
            logger.info("dead worker pods reported terminated: %s", ", ".join(sorted(dead)))
            try:
                self._patch_names(dict.fromkeys(dead))
            except KubeApiError as exc:  # reported terminated anyway; removed next time
                logger.warning("removing dead workers from the desired set failed: %s", exc)
        return nodes

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        """The head and every desired worker not dead, filtered by `tag_filters`."""
        with self._lock:
            started = self._created
        nodes = self._listing()
        with self._lock:
            # Names added while this listing was in flight stay (it may not show them yet).
            for name, seq in list(self._recent.items()):
                if seq <= started:
                    del self._recent[name]
                elif name not in nodes and name in self._nodes:
                    nodes[name] = self._nodes[name]
            self._nodes = nodes
        return [
            name
            for name, node in nodes.items()
            if all(node.tags.get(k) == v for k, v in tag_filters.items())
        ]

    def _node(self, node_id: str) -> _Node | None:
        with self._lock:
            return self._nodes.get(node_id)

    def is_running(self, node_id: str) -> bool:
        """Whether the node's Pod runs (its first container is `running`)."""
        node = self._node(node_id)
        return node is not None and node.running

    def is_terminated(self, node_id: str) -> bool:
        """Whether the node is gone from the last listing."""
        return self._node(node_id) is None

    def node_tags(self, node_id: str) -> dict[str, str]:
        """Ray's tags of the node (kind, user node type, launch request)."""
        node = self._node(node_id)
        return dict(node.tags) if node is not None else {}

    def internal_ip(self, node_id: str) -> str:
        """The Pod IP ("" before the Pod has one)."""
        node = self._node(node_id)
        return node.ip if node is not None else ""

    def external_ip(self, node_id: str) -> str:
        """Pods have no external IP: the Pod IP."""
        return self.internal_ip(node_id)

    # --- writing the desired set -------------------------------------------------------------

    def _patch_names(self, entries: dict[str, str | None]) -> None:
        self._api.request("PATCH", self._state_path, {"data": entries})

    def create_node(
        self, node_config: dict[str, Any], tags: dict[str, str], count: int
    ) -> dict[str, Any] | None:
        """Add `count` new names of the tags' node type to the desired set (one merge patch)."""
        group = tags.get(TAG_USER_NODE_TYPE) or ""
        if not group or group == HEAD_TYPE:
            raise ValueError(f"cannot create nodes of type {group!r}")
        if not 0 < count <= MAX_NAMES_PER_CALL:
            raise ValueError(f"count {count} is not in 1..{MAX_NAMES_PER_CALL}")
        request = tags.get(TAG_LAUNCH_REQUEST) or ""
        value = json.dumps({"group": group, "request": request}, sort_keys=True)
        with self._lock:
            names: list[str] = []
            while len(names) < count:
                name = worker_name(self.cluster, group, self._rng)
                if name not in self._issued and name not in self._nodes:
                    self._issued.add(name)
                    names.append(name)
        # Retried after a lost answer the patch is the same: adding the same keys is idempotent.
        self._patch_names(dict.fromkeys(names, value))
        node_tags = {
            TAG_NODE_KIND: KIND_WORKER,
            TAG_USER_NODE_TYPE: group,
            TAG_LAUNCH_REQUEST: request,
            TAG_NODE_STATUS: STATUS_UP_TO_DATE,
        }
        with self._lock:
            self._created += 1
            for name in names:
                self._nodes[name] = _Node({**node_tags, TAG_NODE_NAME: name}, False, "")
                self._recent[name] = self._created
        logger.info("desired %d more %s workers: %s", count, group, ", ".join(names))
        return {name: {} for name in names}

    def create_node_with_resources_and_labels(
        self,
        node_config: dict[str, Any],
        tags: dict[str, str],
        count: int,
        resources: dict[str, float],
        labels: dict[str, str],
    ) -> dict[str, Any] | None:
        """What the adapter calls: resources and labels are the template's, so ignored."""
        return self.create_node(node_config, tags, count)

    def terminate_nodes(self, node_ids: list[str]) -> dict[str, Any] | None:
        """Remove the names from the desired set (`{name: null}`); the syncer deletes the Pods.

        A name the desired set no longer holds gets no write: a restarted autoscaler
        terminates the dead Ray nodes of Pods deleted before it started.
        """
        with self._lock:
            heads = [n for n in node_ids if n in self._nodes and self._is_head(n)]
            unknown = [n for n in node_ids if n not in self._nodes]
        gone: list[str] = []
        if unknown:  # not in the last listing: ask the desired set itself
            desired = self._desired()
            gone = [n for n in unknown if n not in desired]
        workers = [n for n in node_ids if n not in heads and n not in gone]
        if heads:
            logger.warning("refusing to terminate the head: %s", ", ".join(heads))
        if gone:
            logger.info("not desired already: %s", ", ".join(gone))
        if workers:
            self._patch_names(dict.fromkeys(workers))
            with self._lock:
                for name in workers:
                    self._nodes.pop(name, None)
                    self._recent.pop(name, None)
            logger.info("no longer desired: %s", ", ".join(workers))
        return None

    def terminate_node(self, node_id: str) -> dict[str, Any] | None:
        """One node: see `terminate_nodes`."""
        return self.terminate_nodes([node_id])

    def _is_head(self, node_id: str) -> bool:
        return self._nodes[node_id].tags.get(TAG_NODE_KIND) == KIND_HEAD

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        """Tags are derived from the Pod and the desired set: kept in memory only."""
        with self._lock:
            node = self._nodes.get(node_id)
            if node is not None:
                self._nodes[node_id] = _Node({**node.tags, **tags}, node.running, node.ip)
