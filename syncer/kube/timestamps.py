"""Kubernetes time stamps: `metav1.Time` (whole seconds) and `MicroTime`, in UTC. Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def format_time(seconds: float | None) -> str | None:
    """RFC 3339 in UTC with whole seconds, as Kubernetes writes `metav1.Time`.

    None for None and for a time no `datetime` holds (a hostile value: review L3).
    """
    if seconds is None:
        return None
    try:
        return datetime.fromtimestamp(int(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return None


def parse_time(text: Any) -> float | None:
    """Any RFC 3339 stamp (with or without fractions) as epoch seconds; None otherwise."""
    if not isinstance(text, str) or not text:
        return None
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def micro_time(seconds: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
