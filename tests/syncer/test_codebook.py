"""Packed texts read back exactly: status records, intents and queued Events.

What the syncer keeps many of (a record and an intent per job, an Event per job ending
while the write budget is taken) is kept packed by `syncer.codebook`; whatever the text,
a tenant's included, unpacking gives back exactly what was packed, or a clear error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from renderer import naming
from syncer import status, trust
from syncer.codebook import Codebook
from syncer.errors import IntentError
from syncer.kube import events, leader

_BOOK = Codebook((b'{"derived":{"', b'":"', b'","', b"-head-svc"))


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_any_text_reads_back_exactly(text: str) -> None:
    assert _BOOK.unpack(_BOOK.pack(text)) == text


@given(st.lists(st.sampled_from(['{"derived":{"', '":"', '","', "-head-svc", "a", '"', ","])))
@settings(max_examples=300, deadline=None)
def test_texts_made_of_the_fragments_read_back_exactly(pieces: list[str]) -> None:
    text = "".join(pieces)
    packed = _BOOK.pack(text)
    assert _BOOK.unpack(packed) == text
    if '","' in text:
        assert len(packed) < len(text.encode())


def test_a_text_with_a_control_character_is_kept_as_it_is() -> None:
    text = '{"a":"\x01","b":"-head-svc"}'
    assert _BOOK.pack(text) == text
    assert _BOOK.unpack(text) == text


def test_bytes_no_packing_made_are_an_error_not_a_wrong_text() -> None:
    with pytest.raises(UnicodeDecodeError):
        _BOOK.unpack(b"\xff\x01")


@pytest.mark.parametrize("fragments", [[b"a\x01"], [b"x%d" % i for i in range(32)]])
def test_a_codebook_that_could_not_read_back_is_refused(fragments: list[bytes]) -> None:
    with pytest.raises(ValueError, match="codebook"):
        Codebook(fragments)


def _intent_map(payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "rj-kuberay-intent",
            "namespace": "ns",
            "resourceVersion": "4",
            "labels": {naming.ORIGIN_KIND: "RayJob", naming.ORIGIN_NAME: "rj"},
        },
        "data": {naming.INTENT_KEY: json.dumps(payload, sort_keys=True, separators=(",", ":"))},
    }


_INTENT = {
    "derived": {
        "clusterName": "rj-x1",
        "clusterRendered": True,
        "dashboardURL": "http://rj-x1-head-svc.ns.svc.cluster.local:8265",
        "headPodName": "rj-x1-head-a1",
        "headServiceName": "rj-x1-head-svc",
        "submissionMode": "K8sJobMode",
        "workerPodNames": [],
    },
    "kind": "RayJob",
    "metadata": {"annotations": {}, "labels": {}, "name": "rj", "namespace": "ns"},
    "spec": {"entrypoint": 'python -c "print(1)"', "ttlSecondsAfterFinished": 0},
    "version": 1,
}


def test_a_cached_intent_is_packed_and_reads_back_as_the_written_one() -> None:
    written = _intent_map(_INTENT)
    cached = status.slim_intent(written)
    packed = cached["data"][naming.INTENT_KEY]
    assert isinstance(packed, bytes)
    assert len(packed) < 0.5 * len(written["data"][naming.INTENT_KEY])
    assert trust.load_payload(cached, "RayJob") == trust.load_payload(written, "RayJob")
    assert status.slim_intent(cached) == cached  # projected again: unchanged


def test_a_garbled_packed_intent_is_an_intent_error() -> None:
    cached = status.slim_intent(_intent_map(_INTENT))
    cached["data"][naming.INTENT_KEY] = b"\xff\x02garbled"
    with pytest.raises(IntentError, match="not text"):
        trust.load_payload(cached, "RayJob")


def test_a_queued_event_goes_out_as_it_was_queued_and_packed_while_it_waits() -> None:
    event = events.build_event(
        origin_kind="RayJob",
        origin_name="rj",
        namespace="ns",
        involved={"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": "u-1"},
        event_type="Warning",
        reason="Failed",
        message='the entrypoint said "no"\n',
        now=1_796_325_091.9,
    )
    text = json.dumps(event, separators=(",", ":"))
    packed = leader._EVENTS.pack(text)
    assert len(packed) < 0.5 * len(text)
    assert json.loads(leader._EVENTS.unpack(packed)) == event


def test_an_intent_a_tenant_wrote_with_control_bytes_is_refused_not_unpacked() -> None:
    # A code byte in a tenant's text must not turn into a fragment (say, another
    # dashboardURL): the text is cached as written, and JSON refuses a raw control byte.
    written = _intent_map(_INTENT)
    text = written["data"][naming.INTENT_KEY].replace('"rj-x1-head-svc"', '"\x12\x0c"', 1)
    written["data"][naming.INTENT_KEY] = text
    cached = status.slim_intent(written)
    assert cached["data"][naming.INTENT_KEY] == text
    with pytest.raises(IntentError, match="not JSON"):
        trust.load_payload(cached, "RayJob")
