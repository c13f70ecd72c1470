"""Input documents and output identities: what the compiler passes between its stages.

`Document` is one parsed YAML document with its `Origin`; `ObjectKey` is the identity of
an output object; `document_namespace` is the namespace a document renders into.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from renderer.errors import Origin
from renderer.manifest import Manifest
from renderer.options import RenderOptions


@dataclass(frozen=True, slots=True)
class Document:
    """One parsed YAML document and where it came from."""

    data: Any
    origin: Origin


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """Identity of an output object: two objects with the same key are an error."""

    api_version: str
    kind: str
    namespace: str
    name: str


def document_namespace(doc: Manifest, options: RenderOptions) -> str:
    """The namespace a document renders into: its own, else the render option."""
    meta = doc.get("metadata") or {}
    return str(meta.get("namespace") or options.namespace)
