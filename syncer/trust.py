"""What the syncer believes about an intent ConfigMap, and what it refuses to (DESIGN §1.1).

Anyone who can create a ConfigMap in a watched namespace can write an intent, so nothing in
its payload names *where* the syncer acts or *what* it dials: the namespace and name of the
RayJob or RayService come from the ConfigMap's own metadata and labels, the ConfigMap must
carry the renderer's name for them, and a payload that says otherwise is refused. The
dashboard address is rebuilt here from the head Service name, the ConfigMap's namespace and
the configured cluster domain; a payload URL of any other form is refused. `load_payload`
is total: every shape that is not a JSON object under the size cap is an `IntentError`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from renderer import naming
from syncer import status
from syncer.errors import IntentError

Manifest = dict[str, Any]

MAX_INTENT_BYTES: Final = 256 * 1024  # per intent ConfigMap's `intent.json`
MAX_INT: Final = 10**9  # larger numbers in an intent are not durations or counts we honour
DEFAULT_DASHBOARD_PORT: Final = 8265


def identity(config_map: Manifest, kind: str) -> tuple[str, str]:
    """(namespace, name) of the object an intent ConfigMap speaks for, from its metadata.

    Raises IntentError unless its labels name `kind` and an origin whose intent name is
    the ConfigMap's own name.
    """
    meta = config_map.get("metadata")
    if not isinstance(meta, dict):
        raise IntentError("the intent ConfigMap has no metadata")
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        labels = {}
    namespace, cm_name = meta.get("namespace"), meta.get("name")
    origin_kind, origin = labels.get(naming.ORIGIN_KIND), labels.get(naming.ORIGIN_NAME)
    if not isinstance(namespace, str) or not namespace or not isinstance(cm_name, str):
        raise IntentError("the intent ConfigMap has no namespace or name")
    if origin_kind != kind:
        raise IntentError(f"label {naming.ORIGIN_KIND} is {origin_kind!r}, expected {kind!r}")
    if not isinstance(origin, str) or not origin:
        raise IntentError(f"label {naming.ORIGIN_NAME} is missing")
    if cm_name != naming.intent_configmap_name(origin):
        raise IntentError(
            f"ConfigMap {cm_name!r} is not {naming.intent_configmap_name(origin)!r}, "
            f"the intent name of {origin!r}"
        )
    return namespace, origin


def load_payload(config_map: Manifest, kind: str) -> tuple[str, str, Manifest]:
    """(namespace, name, payload): the identity and the decoded `intent.json`, checked.

    The payload's own `metadata.namespace`/`metadata.name`, when present, must agree with
    the ConfigMap's; its `kind` must be `kind`.
    """
    namespace, name = identity(config_map, kind)
    data = config_map.get("data")
    if isinstance(data, dict) and status.OVERSIZED_KEY in data:
        raise IntentError(
            f"the intent ConfigMap holds {data[status.OVERSIZED_KEY]} bytes of data, "
            f"over {status.MAX_CACHED_DATA}: not cached"
        )
    payload = json_object(
        data if isinstance(data, dict) else {}, naming.INTENT_KEY, "the intent", MAX_INTENT_BYTES
    )
    if payload.get("kind") != kind:
        raise IntentError(f"not a {kind} intent (kind {payload.get('kind')!r})")
    own = payload.get("metadata", {})
    if not isinstance(own, dict):
        raise IntentError("metadata in the intent is not an object")
    for field, expected in (("namespace", namespace), ("name", name)):
        if own.get(field) not in (None, expected):
            raise IntentError(
                f"metadata.{field} in the intent is {own.get(field)!r}, "
                f"but the ConfigMap is for {expected!r}"
            )
    return namespace, name, payload


def obj(value: Any, path: str) -> Manifest:
    """`value` as a JSON object ({} for null); IntentError for any other shape."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise IntentError(f"{path} in the intent is not an object")
    return value


def integer(value: Any, path: str, default: int = 0) -> int:
    """`value` as a bounded non-negative int (`default` for null)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise IntentError(f"{path} in the intent is not an integer in 0..{MAX_INT}: {value!r}")
    return value


_CLAIMED_URL: Final = re.compile(r"http://([^:/]*)(?::(\d{1,5}))?/?")


def dashboard_url(
    namespace: str, head_service: str, claimed: Any, cluster_domain: str = "cluster.local"
) -> str:
    """`http://<head_service>.<namespace>.svc.<cluster_domain>:<port>`, built here.

    The port is the one the renderer wrote (8265 when none); it names the cluster in the
    dashboard pool but is not what is dialled: `syncer.dashboards` dials the live head
    Service's `dashboard` port. `claimed` (the payload's `dashboardURL`) must otherwise be
    exactly this URL, else IntentError: no other host, path, user info, query or fragment.
    """
    if not naming.is_dns1123_label(head_service):
        raise IntentError(f"head Service name {head_service!r} is not a DNS label")
    host = f"{head_service}.{namespace}.svc.{cluster_domain}"
    port = DEFAULT_DASHBOARD_PORT
    if claimed not in (None, ""):
        if not isinstance(claimed, str):
            raise IntentError("derived dashboardURL in the intent is not a string")
        text = claimed if "://" in claimed else f"http://{claimed}"
        # One fixed pattern, the host compared as text: a pattern built per host would be
        # compiled again for every job once there are more than `re`'s cache holds (512).
        match = _CLAIMED_URL.fullmatch(text)
        if match is None or match.group(1) != host or not 0 < int(match.group(2) or port) < 65536:
            raise IntentError(f"derived dashboardURL {claimed!r} is not http://{host}:<port>")
        port = int(match.group(2) or port)
    return f"http://{host}:{port}"


def json_object(data: Manifest, key: str, where: str, max_bytes: int) -> Manifest:
    """`data[key]` decoded as a JSON object of at most `max_bytes`; else an IntentError.

    `where` names the ConfigMap in the messages ("the intent": "... in the intent ConfigMap").
    """
    try:
        text = status.cached_text(data.get(key))  # a cached intent's is packed
    except ValueError as exc:
        raise IntentError(f"{key} is not text: {exc}") from exc
    if not isinstance(text, str) or not text:
        raise IntentError(f"no {key} in {where} ConfigMap")
    if len(text) > max_bytes:
        raise IntentError(f"{key} is {len(text)} bytes, over {max_bytes}")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise IntentError(f"{key} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise IntentError(f"{key} is not a JSON object")
    return value
