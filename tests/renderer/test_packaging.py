"""The wheel holds every package: `packages.find` must reach each sub-package and the schemas.

Built wheels are checked by hand (`pip wheel . --no-deps`); this test checks the
configuration that decides their content, without a build or the network.
"""

from __future__ import annotations

import fnmatch
import tomllib

from tests.paths import REPO as ROOT

TOPS = ("renderer", "syncer", "schemas")


def _config() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        tool: dict[str, object] = tomllib.load(handle)["tool"]["setuptools"]
        return tool


def test_packages_are_found_not_listed() -> None:
    packages = _config()["packages"]
    assert isinstance(packages, dict), "a hand-made list drops new sub-packages silently"
    include = packages["find"]["include"]
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in TOPS
        for init in (ROOT / top).rglob("__init__.py")
        if ".venv" not in init.parts
    }
    assert {"renderer.kinds", "renderer.objects", "renderer.model", "renderer.rules"} <= on_disk
    missed = [n for n in on_disk if not any(fnmatch.fnmatch(n, p) for p in include)]
    assert missed == []
    assert not any(fnmatch.fnmatch("tests.renderer", p) for p in include)


def test_the_json_schemas_and_lua_scripts_ship_as_package_data() -> None:
    data = _config()["package-data"]
    assert data == {
        "schemas": ["*.json"],
        "renderer.health": ["*.lua"],
        "renderer.assets.autoscaler": ["*.py"],
    }
    assert list((ROOT / "schemas").glob("*_v1.json"))
    assert list((ROOT / "renderer" / "health").glob("*.lua"))
