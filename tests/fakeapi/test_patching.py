"""Unit tests of the fake API server's patch formats and selectors (pure functions)."""

import pytest

from tests.fakeapi import patching
from tests.fakeapi.errors import ApiError
from tests.fakeapi.kinds import kind_for_resource
from tests.fakeapi.selectors import matches, parse_field_selector, parse_label_selector

pytestmark = pytest.mark.timeout(10)


def test_merge_patch_merges_maps_deletes_nulls_and_replaces_lists():
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2], "keep": True}
    patched = patching.merge_patch(target, {"a": {"b": None, "d": 3}, "l": [3]})
    assert patched == {"a": {"c": 2, "d": 3}, "l": [3], "keep": True}
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2], "keep": True}


def test_json_patch_applies_every_operation():
    doc = {"a": [1, 2], "b": {"c": "x"}, "m/n": 1}
    ops = [
        {"op": "add", "path": "/a/-", "value": 3},
        {"op": "add", "path": "/a/0", "value": 0},
        {"op": "replace", "path": "/b/c", "value": "y"},
        {"op": "remove", "path": "/m~1n"},
        {"op": "copy", "from": "/b", "path": "/d"},
        {"op": "move", "from": "/d/c", "path": "/e"},
        {"op": "test", "path": "/e", "value": "y"},
    ]
    assert patching.json_patch(doc, ops) == {"a": [0, 1, 2, 3], "b": {"c": "y"}, "d": {}, "e": "y"}


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/a", "value": 2}],
        [{"op": "test", "path": "/missing", "value": 1}],
    ],
)
def test_json_patch_failed_test_is_reported(ops):
    with pytest.raises(patching.PatchError) as caught:
        patching.json_patch({"a": 1}, ops)
    assert caught.value.test_failed


def test_json_patch_rejects_missing_paths():
    with pytest.raises(patching.PatchError):
        patching.json_patch({"a": 1}, [{"op": "remove", "path": "/b"}])
    with pytest.raises(patching.PatchError):
        patching.json_patch({"a": [1]}, [{"op": "replace", "path": "/a/5", "value": 1}])


def test_strategic_merge_merges_keyed_lists_and_honours_directives():
    target = {
        "spec": {
            "containers": [
                {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
                {"name": "b", "image": "b:1"},
            ],
            "schedulingGates": [{"name": "g1"}, {"name": "g2"}],
            "tolerations": [{"key": "t1"}],
        },
        "metadata": {"finalizers": ["f1"]},
    }
    patch = {
        "spec": {
            "containers": [
                {"name": "a", "env": [{"name": "Y", "value": "2"}]},
                {"name": "c", "image": "c:1"},
            ],
            "schedulingGates": [{"name": "g1", "$patch": "delete"}],
            "tolerations": [{"key": "t2"}],
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
        },
        "metadata": {"finalizers": ["f2"]},
    }
    result = patching.strategic_merge_patch(target, patch)
    # The real server's order: $setElementOrder for the containers; without it, an item
    # new to the list (env Y, finalizer f2) goes before the original ones.
    assert result["spec"]["containers"] == [
        {
            "name": "a",
            "image": "a:1",
            "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}],
        },
        {"name": "b", "image": "b:1"},
        {"name": "c", "image": "c:1"},
    ]
    assert result["spec"]["schedulingGates"] == [{"name": "g2"}]
    assert result["spec"]["tolerations"] == [{"key": "t2"}]
    assert result["metadata"]["finalizers"] == ["f2", "f1"]


def test_strategic_merge_keys_ports_by_container_port_or_port():
    pod = {"ports": [{"containerPort": 80, "name": "http"}]}
    assert patching.strategic_merge_patch(
        pod, {"ports": [{"containerPort": 80, "name": "web"}]}
    ) == {"ports": [{"containerPort": 80, "name": "web"}]}
    svc = {"ports": [{"port": 80, "name": "http"}]}
    assert patching.strategic_merge_patch(svc, {"ports": [{"port": 81, "name": "b"}]}) == {
        "ports": [{"port": 81, "name": "b"}, {"port": 80, "name": "http"}]
    }


def test_strategic_merge_replace_and_delete_from_primitive_list():
    target = {"m": {"a": 1, "b": 2}, "finalizers": ["x", "y"], "conditions": [{"type": "A"}]}
    patch = {
        "m": {"$patch": "replace", "c": 3},
        "$deleteFromPrimitiveList/finalizers": ["x"],
        "conditions": [{"$patch": "replace"}, {"type": "B"}],
    }
    assert patching.strategic_merge_patch(target, patch) == {
        "m": {"c": 3},
        "finalizers": ["y"],
        "conditions": [{"type": "B"}],
    }


def test_label_selector_grammar():
    obj = {"metadata": {"labels": {"app": "ray", "tier": "head", "env": "prod"}}}

    def sel(text: str) -> bool:
        return matches(obj, parse_label_selector(text), [])

    assert sel("app=ray")
    assert sel("app==ray,tier=head")
    assert not sel("app!=ray")
    assert sel("missing!=x")
    assert sel("tier in (head, worker)")
    assert not sel("tier notin (head)")
    assert sel("env")
    assert sel("!missing")
    assert not sel("!env")
    with pytest.raises(ApiError) as caught:
        parse_label_selector("app=ray,=bad")
    assert caught.value.code == 400


def test_field_selector_rejects_unsupported_fields():
    pods = kind_for_resource("pods")
    requirements = parse_field_selector("status.phase=Running,metadata.name!=x", pods)
    assert matches({"metadata": {"name": "p"}, "status": {"phase": "Running"}}, [], requirements)
    with pytest.raises(ApiError) as caught:
        parse_field_selector("spec.containers=x", pods)
    assert caught.value.code == 400
    assert "field label not supported" in caught.value.message


def test_strategic_merge_orders_items_as_the_real_server_does():
    # Each case measured on kube-apiserver v1.37.2 (tests/realapi): Service ports merge by
    # `port`; the patch's items go in its order, merged with the others by original position.
    target = {"ports": [{"port": 80, "name": "http"}, {"port": 90, "name": "grpc"}]}

    def order(*ports: tuple[int, str]) -> list[str]:
        patch = {"ports": [{"port": p, "name": n} for p, n in ports]}
        return [p["name"] for p in patching.strategic_merge_patch(target, patch)["ports"]]

    assert order((90, "grpc2")) == ["http", "grpc2"]
    assert order((90, "grpc2"), (100, "new")) == ["http", "grpc2", "new"]
    assert order((90, "grpc"), (80, "http")) == ["grpc", "http"]
    assert order((1, "z"), (2, "y")) == ["z", "y", "http", "grpc"]
