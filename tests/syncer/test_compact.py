"""What the informer caches: `compact`'s interned, key-sharing copies of projected objects.

A cached object must read back exactly as it was given, whatever keys a tenant wrote (a
ConfigMap's data keys may be `__class__` or `__dict__`), while the table of dict shapes
stays bounded; on CPython the compacted dicts are smaller than plain ones (the point).
"""

from __future__ import annotations

import copy
import json
import sys
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from syncer.kube import informer
from syncer.kube.informer import compact


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": "17",
            "uid": f"uid-{name}",
            "labels": {"ray.io/cluster": name, "ray.io/node-type": "head"},
        },
        "status": {"phase": "Running", "ready": True, "ends": {}},
    }


def test_a_compacted_object_reads_back_as_it_was_given() -> None:
    pod = _pod("a")
    kept = compact(copy.deepcopy(pod))
    assert kept == pod
    assert json.dumps(kept, sort_keys=False) == json.dumps(pod, sort_keys=False)  # key order
    assert type(kept) is dict and type(kept["metadata"]["labels"]) is dict


@pytest.mark.parametrize(
    "keys",
    [
        ["__class__", "__dict__", "x"],  # valid ConfigMap data keys: never attributes
        ["__slots__", "__weakref__", "__init__"],
        ["a.b/c", "-", "1"],
        [f"k{i}" for i in range(40)],  # more keys than a shape holds
    ],
)
def test_any_keys_a_tenant_writes_are_kept_as_keys(keys: list[str]) -> None:
    data = {key: f"value-{i}" for i, key in enumerate(keys)}
    first, second = compact(dict(data)), compact(dict(data))
    assert first == data and second == data
    assert list(first) == keys
    assert type(first) is dict


def test_the_shapes_stay_bounded_when_every_object_has_its_own_keys() -> None:
    kept = [
        compact({f"label-{i}": "v", "common": str(i)}) for i in range(informer._SHAPES_MAX + 500)
    ]
    assert len(informer._shapes) <= informer._SHAPES_MAX
    assert all(obj == {f"label-{i}": "v", "common": str(i)} for i, obj in enumerate(kept))


def test_changing_one_compacted_dict_leaves_its_siblings_alone() -> None:
    a, b = compact(_pod("a")), compact(_pod("b"))
    a["metadata"]["labels"]["extra"] = "1"
    del a["status"]["ready"]
    assert b == _pod("b")
    assert compact(_pod("c")) == _pod("c")


def _traced_bytes(make: Callable[[], object], copies: int = 500) -> int:
    """What `copies` results of `make` hold, as tracemalloc counts it (not sys.getsizeof:
    a key-sharing dict's size there includes a share of its class's keys)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(copies)]
        held = tracemalloc.get_traced_memory()[0] - before
        del kept
        return held
    finally:
        tracemalloc.stop()


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's key-sharing dicts")
def test_compacted_objects_hold_less_memory_than_plain_ones() -> None:
    pod = _pod("a")
    compact(copy.deepcopy(pod))  # each shape's first dict lays down its shared keys
    plain = _traced_bytes(lambda: copy.deepcopy(pod))
    compacted = _traced_bytes(lambda: compact(copy.deepcopy(pod)))
    assert compacted < 0.8 * plain, (compacted, plain)
