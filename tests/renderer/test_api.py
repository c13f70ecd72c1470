"""The public API in `renderer/__init__.py`: every exported name, loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import renderer
from renderer import compile as compiler
from renderer import emit, errors, options, sources
from renderer.model import document
from tests.paths import GOLDEN


def test_every_exported_name_is_the_modules_own() -> None:
    homes = {
        "Diagnostic": errors.Diagnostic,
        "Document": document.Document,
        "ManifestError": errors.ManifestError,
        "Problem": errors.Problem,
        "RenderOptions": options.RenderOptions,
        "RenderResult": compiler.RenderResult,
        "dump_all": emit.dump_all,
        "read_documents": sources.read_documents,
        "render": compiler.render,
    }
    assert sorted(renderer.__all__) == sorted(homes)
    for name, value in homes.items():
        assert getattr(renderer, name) is value


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'build_everything'"):
        _ = renderer.build_everything


def test_the_api_renders_a_file_end_to_end() -> None:
    path = GOLDEN / "raycluster-sample" / "input.yaml"
    documents, problems = renderer.read_documents([str(path)])
    assert problems == []
    result = renderer.render(documents, renderer.RenderOptions())
    expected = (GOLDEN / "raycluster-sample" / "expected.yaml").read_text()
    assert renderer.dump_all(result.objects) == expected


def test_the_contract_modules_load_without_the_compiler() -> None:
    code = (
        "import sys; from renderer import naming; "
        "print(sorted(m for m in sys.modules if m.startswith(('renderer.compile', 'jsonschema'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
