"""The patch formats of the Kubernetes API, as pure functions on JSON-like values.

Owns JSON merge patch (RFC 7386), JSON patch (RFC 6902, `test` included), the common
cases of strategic merge patch (maps merge, well-known lists merge by key, `$patch`
directives) and the coarse field sets recorded in `managedFields`. Inputs are never
mutated; every function returns a new value. It must not know about storage or HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.fakeapi.jsontree import clone

Manifest = dict[str, Any]

# Lists that strategic merge patch merges by a key (patchMergeKey in the Kubernetes API
# types); every other list is replaced. Keyed by the field name wherever it appears,
# which is how these names are used across core/v1 and batch/v1.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "conditions": "type",
    "schedulingGates": "name",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
# Lists of scalars that strategic merge patch merges as sets.
_MERGE_SCALARS = {"finalizers"}


class PatchError(Exception):
    """A patch that cannot be applied; `test_failed` marks a failed RFC 6902 `test`."""

    def __init__(self, message: str, *, test_failed: bool = False) -> None:
        super().__init__(message)
        self.test_failed = test_failed


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch: maps merge, `null` deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result: Manifest = clone(target) if isinstance(target, dict) else {}
    _merge_in_place(result, patch)
    return result


def _merge_in_place(result: Manifest, patch: Manifest) -> None:
    # `result` is already a private copy: nested maps merge in place rather than being
    # copied again at every level (a status patch copied the object ~8 times over).
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            if not isinstance(current, dict):
                current = {}
            result[key] = current
            _merge_in_place(current, value)
        else:
            result[key] = clone(value)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer {path!r} does not start with '/'")
    return [_unescape(token) for token in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise PatchError(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"missing path element {token!r}")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise PatchError(f"cannot traverse into a scalar at {token!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"missing value at {path!r}")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, allow_end=False)]
    raise PatchError(f"cannot read {path!r}")


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"cannot remove missing value at {path!r}")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, allow_end=False))
    raise PatchError(f"cannot remove {path!r}")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError(f"cannot add at {path!r}")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """Apply an RFC 6902 JSON patch (add, remove, replace, move, copy, test).

    Raises:
        PatchError: malformed operations, missing paths, or a failed `test`.
    """
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = clone(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation {json.dumps(op)}")
        name, path = op["op"], op["path"]
        if name in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {name!r} needs a value")
        if name == "add":
            doc = _add(doc, path, clone(op["value"]))
        elif name == "remove":
            _remove(doc, path)
        elif name == "replace":
            _get(doc, path)
            if _pointer(path):
                _remove(doc, path)
            doc = _add(doc, path, clone(op["value"]))
        elif name in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise PatchError(f"operation {name!r} needs 'from'")
            value = _remove(doc, source) if name == "move" else clone(_get(doc, source))
            doc = _add(doc, path, value)
        elif name == "test":
            try:
                actual = _get(doc, path)
            except PatchError as exc:
                raise PatchError(f"testing value {path} failed: {exc}", test_failed=True) from exc
            if actual != op["value"]:
                raise PatchError(f"testing value {path} failed", test_failed=True)
        else:
            raise PatchError(f"unknown JSON patch operation {name!r}")
    return doc


def _list_key(field: str, items: list[Any]) -> str | None:
    if field == "ports":
        for item in items:
            if isinstance(item, dict) and "containerPort" in item:
                return "containerPort"
        return "port"
    return _MERGE_KEYS.get(field)


def _merge_keyed_list(
    field: str, target: list[Any], patch: list[Any], order: list[Any] | None = None
) -> list[Any]:
    key = _list_key(field, [*target, *patch])
    if key is None:
        return [_strip_directives(item) for item in patch]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [
            _strip_directives(item)
            for item in patch
            if not (isinstance(item, dict) and item.get("$patch") == "replace")
        ]
    result = clone(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            result.append(_strip_directives(item))
            continue
        positions = [
            i
            for i, existing in enumerate(result)
            if isinstance(existing, dict) and existing.get(key) == item[key]
        ]
        if item.get("$patch") == "delete":
            result = [existing for i, existing in enumerate(result) if i not in positions]
        elif positions:
            result[positions[0]] = strategic_merge_patch(result[positions[0]], item)
        else:
            result.append(_strip_directives(item))
    return _element_order(result, order or patch, target, lambda item: _identity(item, key))


def _identity(item: Any, key: str | None) -> str:
    """What identifies a list item for ordering: its merge key's value, or the item."""
    if key is not None and isinstance(item, dict) and key in item:
        return json.dumps(item[key], sort_keys=True)
    return json.dumps(item, sort_keys=True, default=str)


def _element_order(
    merged: list[Any], patch: list[Any], original: list[Any], ident: Callable[[Any], str]
) -> list[Any]:
    """Order a merged list as the real server does (`patch`: its list or `$setElementOrder`).

    The items the patch names go in the patch's order, the others in the original order,
    and the two run together by their original positions: an item new to the list goes
    before every original item not yet placed (apimachinery's `normalizeElementOrder`). So
    a patch of only new items puts them first, and one that names an original item
    followed by a new one puts the new one after it.
    """
    named = [ident(item) for item in patch]
    in_patch = sorted(
        (item for item in merged if ident(item) in named), key=lambda item: named.index(ident(item))
    )
    server_only = [item for item in merged if ident(item) not in named]
    position: dict[str, int] = {}
    for index, item in enumerate(original):
        position.setdefault(ident(item), index)
    ordered: list[Any] = []
    left, right = 0, 0
    while left < len(server_only) or right < len(in_patch):
        if right >= len(in_patch):
            ordered.append(server_only[left])
            left += 1
        elif left >= len(server_only):
            ordered.append(in_patch[right])
            right += 1
        else:
            a, b = position.get(ident(server_only[left])), position.get(ident(in_patch[right]))
            if a is not None and b is not None and a < b:
                ordered.append(server_only[left])
                left += 1
            else:
                ordered.append(in_patch[right])
                right += 1
    return ordered


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not k.startswith("$") and v is not None
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return clone(value)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply the common cases of a Kubernetes strategic merge patch.

    Maps merge and `null` deletes; the well-known keyed lists (containers, env, ports,
    volumes, volumeMounts, conditions, schedulingGates, ...) merge by key, with
    `$patch: delete` removing an item and `$patch: replace` replacing the list;
    `finalizers` merge as a set, with `$deleteFromPrimitiveList/finalizers`; merged lists
    keep the real server's element order (`_element_order`, `$setElementOrder` honoured);
    `$retainKeys` is accepted and ignored; other lists replace.
    """
    if not isinstance(patch, dict):
        return clone(patch)
    if patch.get("$patch") == "replace":
        return _strip_directives(patch)
    if patch.get("$patch") == "delete":
        return None
    result: Manifest = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            current = result.get(key)
            existing: list[Any] = current if isinstance(current, list) else []
            given = patch.get(f"$setElementOrder/{key}")
            order = given if isinstance(given, list) else None
            if key in _MERGE_SCALARS:
                merged_set = [*existing, *[v for v in value if v not in existing]]
                result[key] = _element_order(
                    merged_set, order or value, existing, lambda item: _identity(item, None)
                )
            else:
                result[key] = _merge_keyed_list(key, existing, value, order)
        else:
            result[key] = _strip_directives(value)
    return result


def field_set(value: Any) -> Manifest:
    """A coarse `FieldsV1` set: `f:<key>` for map keys; lists and scalars are leaves."""
    if not isinstance(value, dict):
        return {}
    fields: Manifest = {}
    for key, sub in value.items():
        fields[f"f:{key}"] = field_set(sub)
    return fields


def changed_fields(old: Any, new: Any) -> Manifest:
    """The coarse field set of what differs between two objects (added, changed, removed)."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return {}
    fields: Manifest = {}
    for key in [*new.keys(), *[k for k in old if k not in new]]:
        if old.get(key) != new.get(key):
            fields[f"f:{key}"] = changed_fields(old.get(key), new.get(key))
    return fields


def leaf_paths(fields: Manifest, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The leaf paths (tuples of map keys) of a coarse field set."""
    paths: list[tuple[str, ...]] = []
    for key, sub in fields.items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        if isinstance(sub, dict) and sub:
            paths.extend(leaf_paths(sub, path))
        else:
            paths.append(path)
    return paths


def merge_field_sets(first: Manifest, second: Manifest) -> Manifest:
    """The union of two coarse field sets."""
    result = clone(first)
    for key, sub in second.items():
        if key in result and isinstance(result[key], dict) and isinstance(sub, dict):
            result[key] = merge_field_sets(result[key], sub)
        else:
            result[key] = clone(sub)
    return result


def remove_path(obj: Manifest, path: tuple[str, ...]) -> None:
    """Delete the value at a map path in place, pruning maps that become empty."""
    if not path:
        return
    head, rest = path[0], path[1:]
    if head not in obj:
        return
    if not rest:
        del obj[head]
        return
    child = obj[head]
    if isinstance(child, dict):
        remove_path(child, rest)
        if not child:
            del obj[head]


_ABSENT = object()


def _value_at(obj: Any, path: tuple[str, ...]) -> Any:
    node = obj
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def _overlaps(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return a[: len(b)] == b or b[: len(a)] == a


def apply_conflicts(
    live: Manifest,
    applied: Manifest,
    paths: list[tuple[str, ...]],
    entries: list[Manifest],
    manager: str,
    subresource: str | None,
) -> list[tuple[str, tuple[str, ...]]]:
    """(other manager, path) for each applied field another manager owns with another value.

    As server-side apply decides: a field `manager` applies whose value differs from the
    live one conflicts with every other manager (Apply or Update) that owns it on the same
    subresource; an equal value is shared ownership, no conflict. Field sets are the
    fake's coarse ones (lists are single fields).
    """
    found: list[tuple[str, tuple[str, ...]]] = []
    for entry in entries:
        if entry.get("subresource") != subresource:
            continue
        if (entry.get("manager"), entry.get("operation")) == (manager, "Apply"):
            continue
        owned = leaf_paths(entry.get("fieldsV1") or {})
        for path in paths:
            if _value_at(live, path) == _value_at(applied, path):
                continue
            if any(_overlaps(path, other) for other in owned):
                found.append((str(entry.get("manager")), path))
    return found


def release_fields(
    entries: list[Manifest], conflicts: list[tuple[str, tuple[str, ...]]]
) -> list[Manifest]:
    """The managedFields after a forced apply took the conflicting fields from their owners."""
    taken: dict[str, list[tuple[str, ...]]] = {}
    for owner, path in conflicts:
        taken.setdefault(owner, []).append(path)
    kept = []
    for entry in entries:
        paths = taken.get(str(entry.get("manager")))
        if paths:
            fields = clone(entry.get("fieldsV1") or {})
            for path in paths:
                _drop_field(fields, path)
            if not leaf_paths(fields):
                continue
            entry = {**entry, "fieldsV1": fields}
        kept.append(entry)
    return kept


def _drop_field(fields: Manifest, path: tuple[str, ...]) -> None:
    """Remove a path (and what is under it) from a coarse field set, pruning empty sets."""
    key = f"f:{path[0]}"
    if key not in fields:
        return
    if len(path) == 1 or not isinstance(fields[key], dict) or not fields[key]:
        del fields[key]
        return
    _drop_field(fields[key], path[1:])
    if not fields[key]:
        del fields[key]
