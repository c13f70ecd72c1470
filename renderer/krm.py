"""`kuberay-krm`: the renderer as a KRM function (kustomize exec function, kpt function).

Reads a `config.kubernetes.io/v1` ResourceList on stdin and writes one on stdout: every
`ray.io` item is replaced by the objects `kuberay render` makes of it (appended after the
other items, in the renderer's order); every other item passes through untouched, with
the annotations kustomize and kpt track it by. Render options come from `functionConfig`:
its `data` (a ConfigMap, string values) or its `spec` (any kind, typed values), keyed by
the `krm` names of `renderer.settings.SETTINGS` (the render options of `kuberay render` in
camelCase, `clusterDomain`, `syncerPodLabels`, ..., but those `NOT_SETTINGS` names with
the reason), checked as the CLI checks them.

Every problem becomes a `results` entry: severity, message, the item (`resourceRef`), the
JSON path in it (`field.path`) and its file (`file.path`, `file.index`: kpt's
`internal.config.kubernetes.io/path` / `config.kubernetes.io/path` annotations, or the
`config.kubernetes.io/origin` that kustomize adds with `buildMetadata: [originAnnotations]`).
The annotations the tools add to track items are dropped from ray.io items before
rendering, so the output is the same as `kuberay render` of the same files. With an
error the items go back unchanged and the exit status is 1. Input that is not a
ResourceList is an error on stderr, exit 1.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, TextIO

import yaml

from renderer import compile as compiler
from renderer import emit, sources
from renderer.errors import Diagnostic, ManifestError, format_path
from renderer.manifest import Manifest
from renderer.options import RenderOptions
from renderer.settings import SETTINGS, Setting, SettingError, render_options

API_VERSION: Final = "config.kubernetes.io/v1"
KIND: Final = "ResourceList"
PATH_ANNOTATIONS: Final = ("internal.config.kubernetes.io/path", "config.kubernetes.io/path")
INDEX_ANNOTATIONS: Final = ("internal.config.kubernetes.io/index", "config.kubernetes.io/index")
ORIGIN_ANNOTATION: Final = "config.kubernetes.io/origin"
# Keys kustomize and kpt write on the items they pass (never part of a user's manifest).
TOOL_ANNOTATION_PREFIXES: Final = (
    "config.kubernetes.io/",
    "internal.config.kubernetes.io/",
    "kustomize.config.k8s.io/",
    "config.k8s.io/",
)
# `kuberay render` options the function has no use for, and why (a test holds every other
# option of the CLI to a functionConfig key).
NOT_SETTINGS: Final = MappingProxyType(
    {
        "output_dir": "the rendered objects go back in the ResourceList",
        "check": "the orchestrator compares or writes the output, not the function",
        "diff": "the orchestrator compares or writes the output, not the function",
        "allow_empty": "a ResourceList without ray.io items passes through unchanged",
        "gitops_config": "a ResourceList carries objects to apply, not tool settings",
        "max_input_bytes": "the function reads one ResourceList its orchestrator built",
        "output_format": "problems are `results` entries, the KRM format",
    }
)
SETTINGS_USED: Final = tuple(s for s in SETTINGS if s.param not in NOT_SETTINGS)
KNOWN_KEYS: Final = frozenset(s.krm for s in SETTINGS_USED)


class ConfigError(ValueError):
    """`functionConfig` holds something the function cannot use."""


def _boolean(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"functionConfig {key}: expected true or false, got {value!r}")


def _gates(value: Any) -> str:
    """`featureGates` (`Name=bool,...` or a mapping) as the CLI's `Name=bool,...` text."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return ",".join(
            f"{name}={str(_boolean(f'featureGates.{name}', flag)).lower()}"
            for name, flag in value.items()
        )
    raise ConfigError("functionConfig featureGates: expected Name=bool,... or a mapping")


def _labels(value: Any) -> list[str]:
    """`syncerPodLabels`: a mapping, a list of KEY=VALUE, or KEY=VALUE,... (ConfigMap data)."""
    if isinstance(value, Mapping):
        return [f"{k}={v}" for k, v in value.items()]
    if isinstance(value, list):
        return [str(item) for item in value]
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    raise ConfigError("functionConfig syncerPodLabels: expected a mapping or KEY=VALUE items")


def _count(key: str, value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ConfigError(f"functionConfig {key}: expected an integer >= 1, got {value!r}")


def _value(setting: Setting, value: Any) -> object:
    key = setting.krm
    if setting.param == "feature_gates":
        return _gates(value)
    if setting.kind in ("bool", "flag"):
        return _boolean(key, value)
    if setting.kind == "count":
        return _count(key, value)
    if setting.kind == "labels":
        return _labels(value)
    if not isinstance(value, str) or (setting.kind == "string" and not value):
        raise ConfigError(f"functionConfig {key}: expected a non-empty string")
    return value


def _in_keys(message: str) -> str:
    """A settings message with the CLI's flags replaced by the functionConfig keys."""
    for setting in sorted(SETTINGS, key=lambda s: -len(s.flag)):
        message = message.replace(setting.flag, setting.krm)
    return message


def options_from(function_config: Any) -> tuple[RenderOptions, bool]:
    """Render options and the `strict` flag from a `functionConfig` (None: the defaults)."""
    if function_config is None:
        return RenderOptions(), False
    if not isinstance(function_config, Mapping):
        raise ConfigError("functionConfig: expected an object")
    given = function_config.get("data")
    if given is None:
        given = function_config.get("spec")
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise ConfigError("functionConfig data/spec: expected a mapping")
    unknown = sorted(set(given) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(
            f"functionConfig: unknown key(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted(KNOWN_KEYS))}"
        )
    values = {s.param: _value(s, given[s.krm]) for s in SETTINGS_USED if s.krm in given}
    try:
        options = render_options(values)
    except SettingError as exc:
        raise ConfigError(f"functionConfig: {_in_keys(str(exc))}") from None
    return options, bool(values.get("strict"))


def _is_ray(item: Any) -> bool:
    return isinstance(item, Mapping) and str(item.get("apiVersion", "")).startswith("ray.io/")


def _annotation(item: Manifest, keys: Sequence[str]) -> str | None:
    annotations = (item.get("metadata") or {}).get("annotations") or {}
    for key in keys:
        if isinstance(annotations.get(key), str):
            return str(annotations[key])
    return None


def _file_path(item: Manifest) -> str | None:
    """The item's file: kpt's path annotations, or kustomize's origin (`originAnnotations`)."""
    path = _annotation(item, PATH_ANNOTATIONS)
    if path is not None:
        return path
    origin = _annotation(item, (ORIGIN_ANNOTATION,))
    if origin is None:
        return None
    try:
        parsed = yaml.load(origin, Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        return None
    found = parsed.get("path") if isinstance(parsed, dict) else None
    return found if isinstance(found, str) else None


def _without_tool_annotations(item: Mapping[str, Any]) -> Manifest:
    """A copy of a ray.io item without the annotations kustomize and kpt add to track it."""
    copied = dict(item)
    meta = copied.get("metadata")
    if isinstance(meta, Mapping) and isinstance(meta.get("annotations"), Mapping):
        kept = {
            k: v
            for k, v in meta["annotations"].items()
            if not str(k).startswith(TOOL_ANNOTATION_PREFIXES)
        }
        copied["metadata"] = {k: v for k, v in meta.items() if k != "annotations"}
        if kept:
            copied["metadata"]["annotations"] = kept
    return copied


def _result(diagnostic: Diagnostic, items: Sequence[Manifest]) -> Manifest:
    """One `results` entry: the diagnostic's item is the one named by its origin's file."""
    item = items[int(diagnostic.origin.file)]
    meta = item.get("metadata") if isinstance(item.get("metadata"), Mapping) else {}
    result: Manifest = {
        "message": diagnostic.problem.message,
        "severity": diagnostic.problem.severity,
    }
    ref = {
        "apiVersion": item.get("apiVersion"),
        "kind": item.get("kind"),
        "name": (meta or {}).get("name"),
        "namespace": (meta or {}).get("namespace"),
    }
    result["resourceRef"] = {k: v for k, v in ref.items() if isinstance(v, str) and v}
    if diagnostic.problem.path:
        result["field"] = {"path": format_path(diagnostic.problem.path).removeprefix("$.")}
    path = _file_path(item)
    if path is not None:
        file: Manifest = {"path": path}
        index = _annotation(item, INDEX_ANNOTATIONS)
        if index is not None and index.isdigit():
            file["index"] = int(index)
        result["file"] = file
    return result


def process(resource_list: Any) -> tuple[Manifest, bool]:
    """The output ResourceList for an input one, and whether it carries an error."""
    if not isinstance(resource_list, Mapping) or resource_list.get("kind") != KIND:
        raise ConfigError(f"expected a {API_VERSION} {KIND} on stdin")
    items = resource_list.get("items") or []
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise ConfigError(f"{KIND} items: expected a list of objects")
    options, strict = options_from(resource_list.get("functionConfig"))
    ray_items = [(index, item) for index, item in enumerate(items) if _is_ray(item)]
    documents = []
    for index, item in ray_items:
        # Each item is one document whose "file" is its index, so problems map back to it.
        text = yaml.safe_dump(_without_tool_annotations(item), sort_keys=False)
        docs, _ = sources.parse_text(text, str(index))
        documents.extend(docs)
    output: Manifest = {"apiVersion": API_VERSION, "kind": KIND}
    try:
        rendered = compiler.render(documents, options)
    except ManifestError as exc:
        output["items"] = items
        output["results"] = [_result(d, items) for d in _ordered(exc.diagnostics)]
        return output, True
    failed = strict and bool(rendered.warnings)
    passed = [item for item in items if not _is_ray(item)]
    output["items"] = items if failed else [*passed, *rendered.objects]
    if rendered.warnings:
        output["results"] = [
            {**_result(d, items), **({"severity": "error"} if strict else {})}
            for d in _ordered(rendered.warnings)
        ]
    return output, failed


def _ordered(diagnostics: Sequence[Diagnostic]) -> list[Diagnostic]:
    return sorted(diagnostics, key=lambda d: (int(d.origin.file), d.problem.path.__repr__()))


def run(stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """Read, process and write one ResourceList; the exit status."""
    try:
        resource_list = yaml.load(stdin.read(), Loader=yaml.CSafeLoader)
        output, failed = process(resource_list)
    except yaml.YAMLError as exc:
        stderr.write(f"kuberay-krm: stdin is not YAML: {exc}\n")
        return 1
    except ConfigError as exc:
        stderr.write(f"kuberay-krm: {exc}\n")
        return 1
    stdout.write(emit.dump(output))
    for result in output.get("results") or []:
        ref = result.get("resourceRef") or {}
        where = (result.get("file") or {}).get("path") or (
            f"{ref.get('kind', '<no kind>')} {ref.get('namespace', '')}/{ref.get('name', '')}"
        )
        field = (result.get("field") or {}).get("path") or "$"
        stderr.write(f"{where}: {result['severity']}: {field}: {result['message']}\n")
    return 1 if failed else 0


def main() -> None:
    """Entry point of the `kuberay-krm` console script."""
    sys.exit(run(sys.stdin, sys.stdout, sys.stderr))
