"""The Kubernetes definitions read one at a time through the cached index (renderer.k8sdefs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from renderer import k8sdefs, schemas


def definitions_file() -> Path:
    version = schemas._resolve_version(schemas.DEFAULT_KUBERNETES_VERSION)
    return schemas._k8s_schema_dirs()[version] / "_definitions.json"


def cached(cache: Path) -> list[Path]:
    return sorted((cache / "k8s-definitions").glob("*.json"))


def test_each_definition_is_the_full_parse_and_the_index_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERAY_CACHE", str(tmp_path))
    source = definitions_file()
    full = json.loads(source.read_text(encoding="utf-8"))["$defs"]
    lazy = k8sdefs.Definitions(source)
    (index_file,) = cached(tmp_path)
    assert source.parent.name in index_file.name
    assert list(lazy) == list(full) and len(lazy) == len(full)
    for name, definition in full.items():
        assert lazy[name] == definition
    assert "no.such.Definition" not in lazy
    with pytest.raises(KeyError):
        lazy["no.such.Definition"]
    # The index holds offsets only: no schema text of Kubernetes.
    index = json.loads(index_file.read_text(encoding="utf-8"))
    assert all(len(spot) == 3 and all(isinstance(n, int) for n in spot) for spot in index.values())
    again = k8sdefs.Definitions(source)  # from the cache file
    assert again._index == lazy._index and not again._fresh


def test_a_stale_or_broken_index_is_rebuilt_and_no_cache_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "v9.9.9" / "_definitions.json"
    source.parent.mkdir()
    source.write_text('{"$defs": {"a.A": {"type": "string"}, "b.B": {"type": "integer"}}}')
    monkeypatch.setenv("KUBERAY_CACHE", str(tmp_path / "cache"))
    assert dict(k8sdefs.Definitions(source)) == {
        "a.A": {"type": "string"},
        "b.B": {"type": "integer"},
    }
    (index_file,) = cached(tmp_path / "cache")
    index_file.write_text('{"a.A": [40, 45, 60], "b.B": [1, 2]}')  # wrong offsets, bad entry
    defs = k8sdefs.Definitions(source)
    assert defs["a.A"] == {"type": "string"} and defs["b.B"] == {"type": "integer"}
    index_file.write_text("not json")
    assert k8sdefs.Definitions(source)["b.B"] == {"type": "integer"}
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory would go")
    monkeypatch.setenv("KUBERAY_CACHE", str(blocked))
    assert k8sdefs.Definitions(source)["a.A"] == {"type": "string"}
    with pytest.raises(k8sdefs.DefinitionsError, match="no \\$defs object"):
        k8sdefs.build_index('{"definitions": {}}')
