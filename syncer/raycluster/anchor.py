"""What a cluster's status ConfigMap is owned by, and whether a cached one is trusted.

KubeRay keeps a RayCluster's status on the RayCluster, so it lives as long as the cluster.
A rendered cluster has no such object; the one that lives as long as the cluster is in
git is its rendered head Service (`<cluster>-head-svc`, or the custom `headService` name):
the renderer writes it for every cluster (plain RayClusters, RayJob clusters, RayService
generations), its name does not change with the pod template, and the GitOps tool prunes
it with the rest of the cluster. So `owner` names the head Service; only when none is
cached (yet) does the head Pod stand in, as before. A head Pod owner is replaced by the
Service as soon as there is one (`move`, before a pass may delete the head), so replacing
or recovering the head no longer lets the garbage collector take the status history.

`trusted` applies the shared rules (`syncer.status.distrust`): the syncer's labels, an
owner among the objects that anchor the status now (the head Service and the head Pod,
the latter for maps written before this rule), and no other writer since this process
wrote it.
"""

from __future__ import annotations

from syncer import status
from syncer.kube import meta
from syncer.kube.cache import Cache
from syncer.kube.client import CONFIGMAPS, Kube, Manifest

KIND = "RayCluster"


def _live_uid(obj: Manifest | None) -> str:
    """The uid of an object that is not being deleted ('' otherwise)."""
    if obj is None or meta.metadata(obj).get("deletionTimestamp"):
        return ""
    return str(meta.metadata(obj).get("uid") or "")


def owner(service: Manifest | None, head: Manifest | None) -> status.Owner | None:
    """The status map's owner: the head Service, else the head Pod, else None."""
    uid = _live_uid(service)
    if service is not None and uid:
        return status.Owner("v1", "Service", meta.name(service), uid)
    uid = _live_uid(head)
    if head is not None and uid:
        return status.Owner("v1", "Pod", meta.name(head), uid)
    return None


def owner_uids(service: Manifest | None, head: Manifest | None) -> set[str]:
    """The uids a trusted status map may be owned by (the head Service and head Pod)."""
    return {
        str(meta.metadata(obj).get("uid") or "")
        for obj in (service, head)
        if obj is not None and meta.metadata(obj).get("uid")
    }


def owners(cm: Manifest) -> list[str]:
    """The owner uids of a (cached) status map."""
    refs = meta.metadata(cm).get("ownerReferences") or []
    return [str(o.get("uid") or "") for o in refs if isinstance(o, dict)]


def trusted(
    cm: Manifest,
    cluster: str,
    service: Manifest | None,
    head: Manifest | None,
    ledger: status.Ledger | None,
) -> str | None:
    """Why the cluster's cached status map is not the syncer's own (None: it is)."""
    return status.distrust(
        cm,
        origin_kind=KIND,
        origin_name=cluster,
        owner_uids=owner_uids(service, head),
        ledger=ledger,
    )


def move(
    kube: Kube,
    statuses: Cache,
    ledger: status.Ledger | None,
    cm: Manifest,
    to: status.Owner | None,
) -> Manifest:
    """`cm` owned by `to` alone: a merge patch guarded by its resourceVersion (no-op if so).

    Only a move to the head Service is written: the head Pod never replaces it.
    """
    if to is None or to.kind != "Service" or owners(cm) == [to.uid]:
        return cm
    body = {
        "metadata": {
            "resourceVersion": meta.metadata(cm).get("resourceVersion"),
            "ownerReferences": [to.reference()],
        }
    }
    written = kube.patch(CONFIGMAPS, meta.namespace(cm), meta.name(cm), body)
    if ledger is not None:
        ledger.wrote(written)
    statuses.upsert(written)
    return statuses.get(meta.namespace(cm), meta.name(cm)) or cm
