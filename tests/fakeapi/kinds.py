"""The registry of resource kinds the fake API server serves, and their discovery documents.

Owns which group/version/resource exists, whether it is namespaced, has a status
subresource or is a custom resource, and the `/api`, `/apis` discovery bodies built from
that. It must not hold objects or know about HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Manifest = dict[str, Any]

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
_STATUS_VERBS = ["get", "patch", "update"]


@dataclass(frozen=True, slots=True)
class Kind:
    """One served resource: `group/version/plural` and how the server treats it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    custom: bool = False
    has_generation: bool = False
    returns_deleted_object: bool = False
    orphan_by_default: bool = False
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """The `apiVersion` of objects of this kind (`v1`, `batch/v1`)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """The kubectl-style resource name: `pods`, `jobs.batch`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        """The singular resource name, the lower-cased kind."""
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        """The kind of list responses: `PodList`."""
        return f"{self.kind}List"


KINDS: tuple[Kind, ...] = (
    Kind(
        "",
        "v1",
        "namespaces",
        "Namespace",
        namespaced=False,
        status_subresource=True,
        short_names=("ns",),
    ),
    Kind(
        "",
        "v1",
        "pods",
        "Pod",
        status_subresource=True,
        has_generation=True,
        returns_deleted_object=True,
        short_names=("po",),
    ),
    Kind(
        "",
        "v1",
        "services",
        "Service",
        status_subresource=True,
        returns_deleted_object=True,
        short_names=("svc",),
    ),
    Kind("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
    Kind("", "v1", "secrets", "Secret"),
    Kind(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        returns_deleted_object=True,
        short_names=("sa",),
    ),
    Kind("", "v1", "events", "Event", short_names=("ev",)),
    Kind(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        status_subresource=True,
        returns_deleted_object=True,
        short_names=("pvc",),
    ),
    # batch/v1 Jobs orphan their pods when deleted without a propagationPolicy, for
    # backwards compatibility: https://github.com/kubernetes/kubernetes/issues/71801
    Kind(
        "batch",
        "v1",
        "jobs",
        "Job",
        status_subresource=True,
        has_generation=True,
        orphan_by_default=True,
    ),
    Kind("coordination.k8s.io", "v1", "leases", "Lease"),
    Kind("events.k8s.io", "v1", "events", "Event", short_names=("ev",)),
    Kind(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        has_generation=True,
        short_names=("netpol",),
    ),
    Kind(
        "networking.k8s.io",
        "v1",
        "ingresses",
        "Ingress",
        status_subresource=True,
        has_generation=True,
        short_names=("ing",),
    ),
    Kind("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Kind(
        "gateway.networking.k8s.io",
        "v1",
        "gateways",
        "Gateway",
        status_subresource=True,
        custom=True,
        has_generation=True,
        short_names=("gtw",),
    ),
    Kind(
        "gateway.networking.k8s.io",
        "v1",
        "httproutes",
        "HTTPRoute",
        status_subresource=True,
        custom=True,
        has_generation=True,
    ),
    Kind(
        "cert-manager.io",
        "v1",
        "issuers",
        "Issuer",
        status_subresource=True,
        custom=True,
        has_generation=True,
    ),
    Kind(
        "cert-manager.io",
        "v1",
        "certificates",
        "Certificate",
        status_subresource=True,
        custom=True,
        has_generation=True,
        short_names=("cert", "certs"),
    ),
)

_BY_PATH = {(k.group, k.version, k.plural): k for k in KINDS}
_BY_RESOURCE = {k.resource: k for k in KINDS}
_BY_TYPE = {(k.api_version, k.kind): k for k in KINDS}


# The top-level fields of each built-in kind besides apiVersion, kind and metadata (the
# real server's OpenAPI schema, one level deep); a kind not listed has spec and status.
_TOP_LEVEL: dict[tuple[str, str], frozenset[str]] = {
    ("v1", "ConfigMap"): frozenset({"data", "binaryData", "immutable"}),
    ("v1", "Secret"): frozenset({"data", "stringData", "type", "immutable"}),
    ("v1", "ServiceAccount"): frozenset(
        {"secrets", "imagePullSecrets", "automountServiceAccountToken"}
    ),
    ("v1", "Event"): frozenset(
        {
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        }
    ),
    ("events.k8s.io/v1", "Event"): frozenset(
        {
            "eventTime",
            "series",
            "reportingController",
            "reportingInstance",
            "action",
            "reason",
            "regarding",
            "related",
            "note",
            "type",
            "deprecatedSource",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
            "deprecatedCount",
        }
    ),
    ("rbac.authorization.k8s.io/v1", "Role"): frozenset({"rules"}),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): frozenset({"subjects", "roleRef"}),
}
_SPEC_STATUS = frozenset({"spec", "status"})
_ALWAYS = frozenset({"apiVersion", "kind", "metadata"})


def unknown_top_level_fields(kind: Kind, body: Manifest) -> list[str]:
    """The top-level fields of `body` that `kind`'s schema does not declare, sorted.

    Custom kinds answer [] (the fake keeps no CRD schemas), and fields below the top
    level are not checked.
    """
    if kind.custom:
        return []
    known = _ALWAYS | _TOP_LEVEL.get((kind.api_version, kind.kind), _SPEC_STATUS)
    return sorted(key for key in body if key not in known)


def find_kind(group: str, version: str, plural: str) -> Kind | None:
    """Return the kind served at `/apis/<group>/<version>/<plural>`, if any."""
    return _BY_PATH.get((group, version, plural))


def kind_for_resource(resource: str) -> Kind:
    """Return the kind for a kubectl-style resource name (`pods`, `jobs.batch`).

    Raises:
        KeyError: no such resource is served.
    """
    return _BY_RESOURCE[resource]


def kind_for_type(api_version: str, kind: str) -> Kind:
    """Return the kind for an object's `apiVersion` and `kind`.

    Raises:
        KeyError: no such kind is served.
    """
    return _BY_TYPE[(api_version, kind)]


def groups() -> list[str]:
    """The served API groups other than the core group, in a stable order."""
    return sorted({k.group for k in KINDS if k.group})


def group_versions(group: str) -> list[str]:
    """The versions served for one API group."""
    return sorted({k.version for k in KINDS if k.group == group})


def _resource_entries(kinds: list[Kind]) -> list[Manifest]:
    entries: list[Manifest] = []
    for k in kinds:
        entry: Manifest = {
            "name": k.plural,
            "singularName": k.singular,
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": list(_VERBS),
        }
        if k.short_names:
            entry["shortNames"] = list(k.short_names)
        entries.append(entry)
        if k.status_subresource:
            entries.append(
                {
                    "name": f"{k.plural}/status",
                    "singularName": "",
                    "namespaced": k.namespaced,
                    "kind": k.kind,
                    "verbs": list(_STATUS_VERBS),
                }
            )
    return entries


def resource_list(group: str, version: str) -> Manifest | None:
    """The `APIResourceList` for `/api/v1` or `/apis/<group>/<version>`."""
    kinds = [k for k in KINDS if k.group == group and k.version == version]
    if not kinds:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": kinds[0].api_version,
        "resources": _resource_entries(kinds),
    }


def api_group(group: str) -> Manifest | None:
    """The `APIGroup` document for `/apis/<group>`."""
    versions = group_versions(group)
    if not versions:
        return None
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[-1],
    }


def api_group_list() -> Manifest:
    """The `APIGroupList` document for `/apis`."""
    listed = [api_group(g) for g in groups()]
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {k: v for k, v in g.items() if k not in ("kind", "apiVersion")} for g in listed if g
        ],
    }


def api_versions(server_address: str) -> Manifest:
    """The `APIVersions` document for `/api`."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }
