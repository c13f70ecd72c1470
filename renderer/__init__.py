"""kuberay render: compile KubeRay manifests into the plain objects the operator would create.

The public API for embedding the compiler (the `kuberay` command is `renderer.cli`):
`read_documents` loads files, `render` compiles them under `RenderOptions` into a
`RenderResult`, or raises `ManifestError` listing every problem; `dump_all` writes the
objects as canonical YAML. Names load on first use, so that the syncer, which imports only
the small contract modules (`renderer.naming`, ...), does not load the compiler.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers; loaded lazily at run time
    from renderer.compile import RenderResult, render
    from renderer.emit import dump_all
    from renderer.errors import Diagnostic, ManifestError, Problem
    from renderer.model.document import Document
    from renderer.options import RenderOptions
    from renderer.sources import read_documents

__all__ = [
    "Diagnostic",
    "Document",
    "ManifestError",
    "Problem",
    "RenderOptions",
    "RenderResult",
    "dump_all",
    "read_documents",
    "render",
]

_HOMES = {
    "Diagnostic": "renderer.errors",
    "Document": "renderer.model.document",
    "ManifestError": "renderer.errors",
    "Problem": "renderer.errors",
    "RenderOptions": "renderer.options",
    "RenderResult": "renderer.compile",
    "dump_all": "renderer.emit",
    "read_documents": "renderer.sources",
    "render": "renderer.compile",
}


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'renderer' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
