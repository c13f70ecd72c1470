"""Object names, label and annotation keys: every one the renderer writes or derives.

KubeRay's (reference raycluster.md §1.2-§1.3) and the project's own deterministic ones
(DESIGN §2). The Kubernetes name grammars live in `k8snames`; its `is_dns1123_*` are named
here too, for the syncer. Pure string functions.
"""

from __future__ import annotations

import json
import string
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from hashlib import sha256
else:  # CPython's own SHA-256 (the same digest): hashlib loads OpenSSL on every start
    try:
        from _sha256 import sha256
    except ImportError:  # pragma: no cover - a Python built without the builtin module
        from hashlib import sha256

from renderer.k8snames import is_dns1123_label as is_dns1123_label
from renderer.k8snames import is_dns1123_subdomain as is_dns1123_subdomain
from schemas.intent import INTENT_KEY as INTENT_KEY  # the contract's, named here too
from schemas.intent import ROLE_INTENT as ROLE_INTENT

# KubeRay's label keys (raycluster.md §1.3).
RAY_CLUSTER: Final = "ray.io/cluster"
RAY_NODE_TYPE: Final = "ray.io/node-type"
RAY_GROUP: Final = "ray.io/group"
RAY_IS_RAY_NODE: Final = "ray.io/is-ray-node"
RAY_IDENTIFIER: Final = "ray.io/identifier"
RAY_REPLICA_INDEX: Final = "ray.io/worker-group-replica-index"
RAY_REPLICA_NAME: Final = "ray.io/worker-group-replica-name"
RAY_HOST_INDEX: Final = "ray.io/replica-host-index"
RAY_HEADLESS_SVC: Final = "ray.io/headless-worker-svc"
RAY_SERVE: Final = "ray.io/serve"
RAY_ORIGIN_NAME: Final = "ray.io/originated-from-cr-name"
RAY_ORIGIN_CRD: Final = "ray.io/originated-from-crd"
RAY_JOB_SUBMISSION_MODE: Final = "ray.io/job-submission-mode"
APP_NAME: Final = "app.kubernetes.io/name"
APP_CREATED_BY: Final = "app.kubernetes.io/created-by"
APP_COMPONENT: Final = "app.kubernetes.io/component"

# KubeRay's annotation keys.
ANN_FT_ENABLED: Final = "ray.io/ft-enabled"
ANN_STORAGE_NS: Final = "ray.io/external-storage-namespace"
ANN_KUBERAY_VERSION: Final = "ray.io/kuberay-version"
ANN_OVERWRITE_CMD: Final = "ray.io/overwrite-container-cmd"
ANN_ENABLE_SERVE_SERVICE: Final = "ray.io/enable-serve-service"
ANN_INGRESS_CLASS: Final = "kubernetes.io/ingress.class"
# Read by Ray's KubeRay provider only: in-place pod resize specs (not supported here).
ANN_IPPR: Final = "ray.io/ippr"

# The project's own keys (DESIGN §1): what the syncer uses to find its work.
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE: Final = "kuberay-render"
ORIGIN_KIND: Final = "kuberay.io/origin-kind"
ORIGIN_NAME: Final = "kuberay.io/origin-name"
TEMPLATE_HASH: Final = "kuberay.io/pod-template-hash"

KUBERAY_APP: Final = "kuberay"
KUBERAY_MANAGER: Final = "ray.io/kuberay-operator"  # the managedBy value KubeRay handles
KUBERAY_OPERATOR: Final = "kuberay-operator"
HEAD_GROUP: Final = "headgroup"

# Alphabet KubeRay draws multi-host replica names from (utils.go); we derive from a hash instead.
_REPLICA_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_BASE36: Final = string.digits + string.ascii_lowercase
# The ASCII characters Go's unicode.IsPunct accepts (Unicode category P). Python's
# string.punctuation also holds the symbols $ + < = > ^ ` | ~, which KubeRay keeps.
_GO_PUNCTUATION: Final = frozenset("!\"#%&'()*,-./:;?@[\\]_{}")


def check_name(name: str) -> str:
    """KubeRay's CheckName: keep the last 50 characters, then fix a digit or punctuation start."""
    if len(name) > 50:
        name = name[-50:]
    if name and name[0] in string.digits:
        name = "r" + name[1:]
    if name and name[0] in _GO_PUNCTUATION:
        name = "r" + name[1:]
    return name


def check_label(value: str) -> str:
    """KubeRay's CheckLabel: keep the last 63 characters, then fix a punctuation start."""
    if len(value) > 63:
        value = value[-63:]
    if value and value[0] in _GO_PUNCTUATION:
        value = "r" + value[1:]
    return value


def head_service_name(cluster: str) -> str:
    """`<C>-head-svc`, KubeRay's default head Service name."""
    return f"{cluster}-head-svc"


def serve_service_name(cluster: str) -> str:
    """`<C>-serve-svc`."""
    return f"{cluster}-serve-svc"


def headless_service_name(cluster: str) -> str:
    """`<C>-headless`, the worker Service of multi-host groups."""
    return f"{cluster}-headless"


def ingress_name(cluster: str) -> str:
    """KubeRay's Ingress name, `CheckName(<C>-head-ingress)`."""
    return check_name(f"{cluster}-head-ingress")


def gcs_pvc_name(cluster: str) -> str:
    """`<C>-gcs-pvc`, the operator-managed RocksDB volume claim."""
    return f"{cluster}-gcs-pvc"


def default_storage_namespace(namespace: str, cluster: str) -> str:
    """`<NS>/<C>`: the Redis storage namespace when neither option nor annotation sets one.

    KubeRay uses the RayCluster's UID, which no renderer can know. A Kubernetes namespace
    holds no `/`, so the pair is unique per cluster, and it depends on nothing in the Pod
    templates: a changed template keeps the GCS state, as a UID does within one lifetime.
    """
    return f"{namespace}/{cluster}"


def identifier(cluster: str, node_type: str) -> str:
    """The `ray.io/identifier` label value for head or worker pods."""
    return check_label(f"{cluster}-{node_type}")


def canonical_json(value: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, UTF-8 characters kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_hash(value: Any, length: int = 5) -> str:
    """A short base-36 hash of the canonical JSON of `value` (DESIGN §2)."""
    digest = sha256(canonical_json(value).encode()).digest()
    number = int.from_bytes(digest[:16], "big")
    chars = []
    for _ in range(length):
        number, rem = divmod(number, 36)
        chars.append(_BASE36[rem])
    return "".join(chars)


def replica_name(group: str, cluster: str, replica: int, template_hash: str) -> str:
    """Deterministic stand-in for KubeRay's random multi-host replica name `<G>-xxxxx`."""
    digest = sha256(f"{cluster}/{group}/{replica}/{template_hash}".encode()).digest()
    number = int.from_bytes(digest[:8], "big")
    chars = []
    for _ in range(5):
        number, rem = divmod(number, len(_REPLICA_ALPHABET))
        chars.append(_REPLICA_ALPHABET[rem])
    return f"{group}-{''.join(chars)}"


def _fit(prefix: str, suffix: str, limit: int = 63) -> str:
    room = limit - len(suffix)
    return prefix[:room].rstrip("-.") + suffix


def head_pod_name(cluster: str, template_hash: str) -> str:
    """`<c>-head-<hash>`: KubeRay's head prefix with the template hash for the random part."""
    return _fit(cluster[:50].lower(), f"-head-{template_hash}")


def worker_pod_name(cluster: str, group: str, template_hash: str, index: int) -> str:
    """`<c>-<g>-worker-<hash>-<index>`, within 63 characters.

    The prefix is cut as if the index had 5 digits, so scaling a group never renames
    the pods it already has.
    """
    prefix = f"{cluster}-{group}"[:50].lower()
    room = 63 - len(f"-worker-{template_hash}-") - 5
    return prefix[:room].rstrip("-.") + f"-worker-{template_hash}-{index}"


# The intent ConfigMap: the renderer's record, for the syncer, of what git asked for
# (the syncer has no access to git). One per RayJob / RayService.
ROLE: Final = "kuberay.io/role"
# Set by the syncer (never by git): what the serve Service of a RayService selects,
# and the pod annotation that asks a RayJob cluster pod to stop Ray and exit 0.
SERVE_ACTIVE: Final = "kuberay.io/serve-active"
SHUTDOWN_REQUESTED: Final = "kuberay.io/shutdown-requested"
CLUSTER_READY_GATE: Final = "kuberay.io/cluster-ready"
RUN_ANNOTATION: Final = "kuberay.io/run"
# On the objects of a RayService generation that the syncer deletes once it has drained it:
# "retire with generation <value>". A claim rendered from `deletionPolicy: Retain` never has it.
RETIRE_WITH: Final = "kuberay.io/retire-with"
PRUNE_PROTECTION: Final = MappingProxyType(
    {
        "argocd.argoproj.io/sync-options": "Prune=false",
        "kustomize.toolkit.fluxcd.io/prune": "disabled",
    }
)


def intent_configmap_name(origin_name: str) -> str:
    """`<name>-kuberay-intent`: the ConfigMap that carries a RayJob's or RayService's spec."""
    return f"{origin_name}-kuberay-intent"


def status_configmap_name(origin_name: str) -> str:
    """`<name>-kuberay-status`: the syncer's status record (DESIGN §1)."""
    return f"{origin_name}-kuberay-status"


def serve_config_name(generation: str) -> str:
    """`<gen>-serve-config`: the ConfigMap with one RayService generation's `serveConfigV2`."""
    return f"{generation}-serve-config"


# Where a RayJob's Ray container sees its own annotations (a downward API volume), for the
# shutdown wrapper; reserved names the user's pod template may not take.
PODINFO_VOLUME: Final = "kuberay-podinfo"
PODINFO_DIR: Final = "/etc/kuberay/podinfo"
PODINFO_FILE: Final = "annotations"
