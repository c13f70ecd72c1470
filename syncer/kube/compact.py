"""Small copies of cached objects: interned strings, key-sharing dicts, shared subtrees.

`compact` is what every informer applies to a projected object before caching it. Three
things make ten thousand jobs' objects small, each read back as plain dicts and lists:
- keys and short strings interned: every pod repeats the same field names and labels;
- key-sharing dicts (CPython, PEP 412): a dict made as an instance's `__dict__` keeps
  its keys in its class, one class per key tuple, and only its values of its own;
- shared subtrees: a subtree of a shape a projection names (`share_shape`: a pod's spec,
  a Ready condition) that is equal to one cached before is that one, so a thousand
  submitter pods keep one spec. Only low-variety shapes are named; the table is bounded.

Cached objects are read-only to everyone: a shared subtree is in many objects at once.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Hashable
from typing import Any, Final

Manifest = dict[str, Any]

_INTERNED_MAX: Final = 64  # strings up to this long are shared between cached objects

# Bounded: more keys or more shapes than these (a tenant's labels may take any keys) get
# an ordinary dict.
_SHAPE_KEYS_MAX: Final = 16
_SHAPES_MAX: Final = 1024
_shapes: dict[tuple[Any, ...], type] = {}

# Shared subtrees: a table from a subtree's content to the one copy. A tenant can fill it
# (a new readiness message on every pod); when full it is emptied and starts again, which
# unshares nothing already cached and never grows past the limit. A subtree with more
# leaves or longer strings than these is not shared.
_SHARED_MAX: Final = 4096
_SHARED_LEAVES_MAX: Final = 32
_SHARED_TEXT_MAX: Final = 256
_shared_shapes: set[tuple[str, ...]] = set()
_shared: dict[Hashable, Any] = {}
_shared_lock = threading.Lock()


def share_shape(*keys: str) -> None:
    """Share dicts with exactly these keys, in this order, when their contents are equal."""
    _shared_shapes.add(tuple(sys.intern(key) for key in keys))


def _new_dict(keys: tuple[Any, ...]) -> Manifest:
    """An empty dict that will share `keys` (in that order) with its kind, when it can."""
    shape = _shapes.get(keys)
    if shape is None:
        if (
            not keys
            or len(keys) > _SHAPE_KEYS_MAX
            or len(_shapes) >= _SHAPES_MAX
            or not all(type(key) is str for key in keys)
        ):
            return {}
        shape = _shapes.setdefault(keys, type("SharedKeys", (), {"__slots__": ("__dict__",)}))
    made: Manifest = shape().__dict__
    return made


def compact(value: Any) -> Any:
    """`value` with keys and short strings interned, dicts key-sharing, shapes shared.

    Dicts come back as new dicts (or a shared one), lists are compacted in place.
    """
    if isinstance(value, dict):
        keys = tuple(value)
        out = _new_dict(keys)
        for key, item in value.items():
            if key == "resourceVersion":
                out["resourceVersion"] = item  # unique to one object: sharing saves nothing
            else:
                out[sys.intern(key) if type(key) is str else key] = compact(item)
        return _share(out) if keys in _shared_shapes else out
    if isinstance(value, list):
        value[:] = [compact(item) for item in value]
        return value
    if isinstance(value, str) and len(value) <= _INTERNED_MAX:
        return sys.intern(value)
    return value


def _share(node: Manifest) -> Manifest:
    """The cached copy equal to `node`, or `node` (now the copy), or `node` unshared."""
    signature = _signature(node, [_SHARED_LEAVES_MAX])
    if signature is _UNSHAREABLE:
        return node
    with _shared_lock:
        found: Manifest | None = _shared.get(signature)
        if found is not None:
            return found
        if len(_shared) >= _SHARED_MAX:
            _shared.clear()
        _shared[signature] = node
    return node


_UNSHAREABLE: Final = ("unshareable",)


def _signature(value: Any, budget: list[int]) -> Hashable:
    """A hashable of `value`'s content (True, 1 and 1.0 differ), or `_UNSHAREABLE`.

    `_UNSHAREABLE`: too many leaves, too long a string, or a kind not shared.
    """
    budget[0] -= 1
    if budget[0] < 0:
        return _UNSHAREABLE
    if isinstance(value, dict):
        parts: list[Hashable] = ["{"]
        for key, item in value.items():
            inner = _signature(item, budget)
            if inner is _UNSHAREABLE:
                return _UNSHAREABLE
            parts += (key, inner)
        return tuple(parts)
    if isinstance(value, list):
        items = [_signature(item, budget) for item in value]
        return _UNSHAREABLE if any(i is _UNSHAREABLE for i in items) else ("[", *items)
    if value is None or (type(value) is str and len(value) <= _SHARED_TEXT_MAX):
        return value
    if type(value) in (bool, int, float):
        return (type(value).__name__, value)
    return _UNSHAREABLE
