"""The informer's cache against objects it cannot keep, and watch events (review H1).

These tests drive one `Informer.run` through a scripted list and watch (no server): an
object nested too deep to compact, as a tenant may write one, must be skipped and counted,
the others cached and the watch go on; a MODIFIED event replaces the object and its index.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from syncer.kube.client import CONFIGMAPS, Manifest, WatchEvent
from syncer.kube.forwarding import ForwardingKube
from syncer.kube.informer import Informer, keep_all


def _cm(name: str, version: str, **data: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": version,
            "labels": {"app": name.split("-")[0]},
        },
        "data": dict(data),
    }


class Scripted(ForwardingKube):
    """Lists `listed`, then one watch delivers `events` and the informer is stopped."""

    def __init__(
        self, listed: Sequence[Manifest], events: Sequence[WatchEvent], stop: threading.Event
    ) -> None:
        super().__init__(None)  # type: ignore[arg-type]  # no server behind it
        self.listed = list(listed)
        self.events = list(events)
        self.stop = stop

    def list_pages(self, *args: Any, **kwargs: Any) -> Iterator[tuple[list[Manifest], str]]:
        yield [dict(obj) for obj in self.listed], "10"

    def watch(self, *args: Any, **kwargs: Any) -> Iterator[WatchEvent]:
        yield from self.events
        self.stop.set()


def _run(listed: Sequence[Manifest], events: Sequence[WatchEvent] = ()) -> Informer:
    stopped = threading.Event()
    informer = Informer(Scripted(listed, events, stopped), CONFIGMAPS, "ns", project=keep_all)
    informer.add_index("app", lambda obj: [obj["metadata"]["labels"]["app"]])
    informer._stop = stopped  # one run: list, one watch, stop
    informer.run()
    return informer


def _nested(depth: int) -> dict[str, Any]:
    inner: dict[str, Any] = {}
    for _ in range(depth):
        inner = {"x": inner}
    return inner


def test_an_object_too_deep_to_keep_is_skipped_and_the_rest_are_kept() -> None:
    deep = _cm("deep-a", "2")
    deep["data"] = _nested(5_000)  # more levels than `compact` can recurse into
    later_deep = _cm("deep-b", "4")
    later_deep["data"] = _nested(5_000)
    informer = _run(
        [_cm("web-a", "1"), deep],
        [WatchEvent("ADDED", later_deep), WatchEvent("ADDED", _cm("web-b", "5"))],
    )
    assert informer.skipped == 2  # one from the list, one from the watch
    assert informer.crashes == 0
    assert sorted(o["metadata"]["name"] for o in informer.items()) == ["web-a", "web-b"]
    assert informer.get("ns", "deep-a") is None
    assert informer.resource_version == "5"  # the watch went on past the bad event


def test_a_watch_event_replaces_the_object_and_its_index() -> None:
    modified = _cm("web-a", "11", key="two")
    modified["metadata"]["labels"]["app"] = "api"
    informer = _run([_cm("web-a", "1", key="one")], [WatchEvent("MODIFIED", modified)])
    assert informer.get("ns", "web-a") == modified
    assert informer.by_index("app", "web") == []
    assert informer.by_index("app", "api") == [modified]


def test_an_object_of_another_namespace_is_skipped_not_mixed_with_this_ones() -> None:
    # A namespaced informer keys its cache by name; an object the server should not have
    # sent (another namespace) must not take the place of this namespace's namesake.
    foreign = _cm("web-a", "2", key="theirs")
    foreign["metadata"]["namespace"] = "other"
    late_foreign = _cm("web-b", "6")
    late_foreign["metadata"]["namespace"] = "other"
    informer = _run(
        [_cm("web-a", "1", key="ours"), foreign],
        [WatchEvent("ADDED", late_foreign), WatchEvent("DELETED", foreign)],
    )
    assert informer.skipped == 3  # two foreign objects and one foreign deletion
    assert informer.get("ns", "web-a") == _cm("web-a", "1", key="ours")
    assert informer.get("other", "web-a") is None
    assert informer.get("ns", "web-b") is None
    assert [o["metadata"]["namespace"] for o in informer.by_index("app", "web")] == ["ns"]
    informer.forget("other", "web-a")  # a foreign name: nothing of this namespace goes
    assert len(informer) == 1


def test_long_watches_are_spread_over_t_to_2t_and_short_ones_kept() -> None:
    # As client-go's reflector: informers do not renew their watches together.
    stopped = threading.Event()
    asked: list[int] = []

    class Timed(Scripted):
        def watch(self, *args: Any, **kwargs: Any) -> Iterator[WatchEvent]:
            asked.append(kwargs["timeout_s"])
            yield WatchEvent("BOOKMARK", _cm("x", str(len(asked))))
            if len(asked) >= 200:
                self.stop.set()

    for timeout, expect_spread in ((300, True), (5, False)):
        asked.clear()
        stopped.clear()
        informer = Informer(
            Timed([], [], stopped), CONFIGMAPS, "ns", project=keep_all, watch_timeout_s=timeout
        )
        informer._stop = stopped
        informer.run()
        if expect_spread:
            assert all(timeout <= t < 2 * timeout for t in asked)
            assert len(set(asked)) > 50  # spread, not one value
            assert sum(asked) / len(asked) > 1.3 * timeout
        else:
            assert set(asked) == {timeout}
        assert not informer.stalled(informer.progress_at + 2 * timeout)
