"""Schema checks: ray.io documents against our schemas, core objects against Kubernetes'.

Owns loading the packaged schemas (`schemas/*.json`, once, read beside the `schemas` package)
and the Kubernetes OpenAPI definitions that `kubernetes-validate` ships, and turning schema failures
into `Problem`s. A valid document costs one call of a predicate compiled from the schema;
jsonschema is imported and run only to explain an invalid one. No semantic rules live here.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import schemas as _schema_package
from renderer.errors import JsonPath, Problem, show
from renderer.manifest import Manifest

if TYPE_CHECKING:
    from jsonschema import FormatChecker
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

Predicate = Callable[[object], bool]

_SCHEMA_DIR = Path(_schema_package.__file__).parent
RAY_GROUP = "ray.io"
# Each packaged schema's `$id` is this and its file's stem (checked when it is loaded).
_RAY_ID_PREFIX = "urn:kuberay-gitops:schemas:"
RAY_API_VERSION = "ray.io/v1"
# Kind -> packaged schema file. RayCronJob is checked too; whether it renders is not ours.
RAY_KINDS = {
    "RayCluster": "raycluster_v1.json",
    "RayJob": "rayjob_v1.json",
    "RayService": "rayservice_v1.json",
    "RayCronJob": "raycronjob_v1.json",
}
# The kinds named when a ray.io kind is unknown (RayCronJob is accepted but not advertised).
RENDERED_KINDS = ("RayCluster", "RayJob", "RayService")
DEFAULT_KUBERNETES_VERSION = "1.33"

# Where our schemas mark an embedded Kubernetes type, and the base URI under which the
# Kubernetes OpenAPI definitions of kubernetes-validate are registered.
K8S_TYPE_KEYWORD = "x-kubernetes-type"
K8S_DEFINITIONS_URI = "https://kubernetes.io/api/_definitions.json"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
# The canonical quantity form (as in the KubeRay CRDs and resource.Quantity's documentation).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_EXPECTED = 'a quantity such as "500m", "2Gi" or 4'
# kubernetes-validate states both alternatives of these as `[T, "null"]` inside a `oneOf`, so
# null matches twice and fails; and it accepts any string as a quantity. Ours: null is fine
# (the API server reads it as unset) and a quantity string must parse.
_PATCHED_DEFINITIONS: dict[str, Manifest] = {
    _QUANTITY: {
        "anyOf": [
            {"type": "string", "pattern": QUANTITY_PATTERN, "x-expected": _QUANTITY_EXPECTED},
            {"type": ["number", "null"]},
        ],
    },
    _INT_OR_STRING: {"anyOf": [{"type": ["string", "null"]}, {"type": "integer"}]},
}

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_TYPE_NAMES = {
    "object": "an object",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}
# Keywords that never affect validity (annotations, and our own markers).
_ANNOTATIONS = frozenset(
    {"description", "default", "title", "$comment", "$schema", "$id", "$defs", "examples"}
)


class SchemaError(Exception):
    """A packaged schema uses something the checker does not support (a bug, not user input)."""


# --- formats -------------------------------------------------------------------------------


def _int_format(name: str) -> Predicate:
    low, high = _INT_RANGES[name]

    def check(value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        return low <= value <= high

    return check


# jsonschema checks `format` only with a format checker; we check exactly these, in both the
# compiled predicates and the jsonschema validator, with the same functions.
_FORMATS: dict[str, Predicate] = {name: _int_format(name) for name in _INT_RANGES}


# --- loading -------------------------------------------------------------------------------


@functools.cache
def schema_for(kind: str) -> Manifest:
    """Return the packaged schema of a ray.io/v1 kind (shared: do not modify it).

    Raises:
        KeyError: `kind` is not one of `RAY_KINDS`.
    """
    # Beside the `schemas` package's module (importlib.resources would load zipfile,
    # tempfile and shutil on every start, issue 11; the package ships unzipped).
    text = (_SCHEMA_DIR / RAY_KINDS[kind]).read_text(encoding="utf-8")
    schema: Manifest = json.loads(text)
    return schema


@functools.cache
def _k8s_schema_dirs() -> dict[tuple[int, int], Path]:
    # Located without importing kubernetes_validate: only its data files are used.
    import importlib.util

    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover - install bug
        raise SchemaError("the package kubernetes-validate is not installed")
    root = Path(next(iter(spec.submodule_search_locations))) / "kubernetes-json-schema"
    found: dict[tuple[int, int], Path] = {}
    for entry in root.iterdir():
        match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+-local-strict", entry.name)
        if match:
            found[(int(match[1]), int(match[2]))] = entry
    return dict(sorted(found.items()))


def kubernetes_versions() -> tuple[str, ...]:
    """The Kubernetes minor versions whose OpenAPI schemas are available, oldest first."""
    return tuple(f"{major}.{minor}" for major, minor in _k8s_schema_dirs())


@functools.cache
def _resolve_version(kubernetes_version: str) -> tuple[int, int]:
    """The newest available schema version not newer than `kubernetes_version`."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(\.\d+)?", kubernetes_version.strip())
    if match is None:
        raise ValueError(f'invalid Kubernetes version "{kubernetes_version}"; expected e.g. "1.33"')
    wanted = (int(match[1]), int(match[2]))
    usable = [version for version in _k8s_schema_dirs() if version <= wanted]
    if not usable:
        raise ValueError(
            f'unsupported Kubernetes version "{kubernetes_version}"; '
            f"expected {kubernetes_versions()[0]} or newer"
        )
    return usable[-1]


@functools.cache
def _k8s_lazy_definitions(version: tuple[int, int]) -> Mapping[str, Any]:
    """The definitions of one version, each parsed when first used, with the patches above."""
    from renderer import k8sdefs

    return _Patched(k8sdefs.Definitions(_k8s_schema_dirs()[version] / "_definitions.json"))


class _Patched(Mapping[str, Any]):
    """A definitions mapping in which `_PATCHED_DEFINITIONS` replace the file's."""

    def __init__(self, definitions: Mapping[str, Any]) -> None:
        self._definitions = definitions

    def __getitem__(self, name: str) -> Any:
        if name in _PATCHED_DEFINITIONS:
            return _PATCHED_DEFINITIONS[name]
        return self._definitions[name]

    def __contains__(self, name: object) -> bool:
        return name in _PATCHED_DEFINITIONS or name in self._definitions

    def __iter__(self) -> Iterator[str]:
        return iter(self._definitions)

    def __len__(self) -> int:
        return len(self._definitions)


@functools.cache
def _k8s_definitions(version: tuple[int, int]) -> Manifest:
    """The `_definitions.json` document of one version, with the patches above applied."""
    path = _k8s_schema_dirs()[version] / "_definitions.json"
    document: Manifest = json.loads(path.read_text(encoding="utf-8"))
    document["$defs"].update(_PATCHED_DEFINITIONS)
    return document


@functools.cache
def _k8s_kinds(version: tuple[int, int]) -> dict[tuple[str, str, str], str]:
    """(group, version, kind) -> definition name, from `x-kubernetes-group-version-kind`."""
    kinds: dict[tuple[str, str, str], str] = {}
    for name, definition in sorted(_k8s_definitions(version)["$defs"].items()):
        for gvk in definition.get("x-kubernetes-group-version-kind", []):
            kinds.setdefault((gvk["group"], gvk["version"], gvk["kind"]), name)
    return kinds


def _linked(node: object) -> object:
    """A copy of a schema in which each embedded-type marker also refers to its definition."""
    if isinstance(node, dict):
        out = {key: _linked(value) for key, value in node.items()}
        if K8S_TYPE_KEYWORD in node:
            out["$ref"] = f"{K8S_DEFINITIONS_URI}#/$defs/{node[K8S_TYPE_KEYWORD]}"
        return out
    if isinstance(node, list):
        return [_linked(value) for value in node]
    return node


@functools.cache
def _linked_schema(kind: str) -> Manifest:
    linked = _linked(schema_for(kind))
    if not isinstance(linked, dict):  # pragma: no cover - a schema file is a JSON object
        raise SchemaError(f"the schema of {kind} is not an object")
    return linked


# --- the compiled predicates (the happy path) ----------------------------------------------


def _always(value: object) -> bool:
    return True


def _never(value: object) -> bool:
    return False


def _is_integer(value: object) -> bool:
    if isinstance(value, int):
        return not isinstance(value, bool)
    return isinstance(value, float) and value.is_integer()


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_TYPE_CHECKS: dict[str, Predicate] = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "integer": _is_integer,
    "number": _is_number,
}


@functools.cache
def _type_check(types: tuple[str, ...]) -> Predicate:
    """One predicate for a `type` keyword (shared between schemas with the same types)."""
    for name in types:
        if name not in _TYPE_CHECKS:
            raise SchemaError(f"unknown type {name!r}")
    if not types:
        return _never
    if types == ("string", "null"):
        return lambda value: value is None or isinstance(value, str)
    if len(types) == 1:
        return _TYPE_CHECKS[types[0]]
    return _any_of(tuple(_TYPE_CHECKS[name] for name in types))


def _any_of(checks: tuple[Predicate, ...]) -> Predicate:
    def check_any(value: object) -> bool:
        for check in checks:  # noqa: SIM110 - hot path: cheaper than any(genexpr)
            if check(value):
                return True
        return False

    return check_any


def _all_of(checks: list[Predicate]) -> Predicate:
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:  # the common pair gets a cheaper closure
        first, second = checks
        return lambda value: first(value) and second(value)
    frozen = tuple(checks)

    def check_all(value: object) -> bool:
        for check in frozen:  # noqa: SIM110 - hot path: a loop is ~3x cheaper than all(genexpr)
            if not check(value):
                return False
        return True

    return check_all


def _object_check(
    others: Predicate,
    properties: dict[str, Predicate],
    additional: Predicate | None,
    required: tuple[str, ...],
) -> Predicate:
    """Type check and object keywords in one pass; `others` decides for non-objects."""

    def check(value: object) -> bool:
        if not isinstance(value, dict):
            return others(value)
        for key, item in value.items():
            found = properties.get(key)
            if found is not None:
                if not found(item):
                    return False
            elif additional is not None and not additional(item):
                return False
        for name in required:  # noqa: SIM110 - hot path: cheaper than all(genexpr)
            if name not in value:
                return False
        return True

    return check


def _array_check(others: Predicate, items: Predicate, low: int, high: float) -> Predicate:
    def check(value: object) -> bool:
        if not isinstance(value, list):
            return others(value)
        if not low <= len(value) <= high:
            return False
        for item in value:  # noqa: SIM110 - hot path: cheaper than all(genexpr)
            if not items(item):
                return False
        return True

    return check


def _enum_check(values: list[object]) -> Predicate:
    if not all(value is None or isinstance(value, str) for value in values):
        raise SchemaError(f"only string enums are supported, got {values!r}")
    strings = frozenset(value for value in values if isinstance(value, str))
    allows_null = None in values
    return lambda value: (
        (isinstance(value, str) and value in strings) or (allows_null and value is None)
    )


def _length_check(low: int, high: float) -> Predicate:
    return lambda value: not isinstance(value, str) or low <= len(value) <= high


def _range_check(low: float, high: float) -> Predicate:
    def check(value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        return not (value < low or value > high)

    return check


def _pattern_check(pattern: str) -> Predicate:
    search = re.compile(pattern).search
    return lambda value: not isinstance(value, str) or search(value) is not None


_HANDLED = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "required",
        "items",
        "minItems",
        "maxItems",
        "enum",
        "const",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "pattern",
        "format",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "$ref",
    }
)


class _Compiler:
    """Compiles draft 2020-12 schemas (the subset our schemas use) into predicates.

    A predicate answers exactly what `jsonschema.Draft202012Validator(...).is_valid` answers,
    with `_FORMATS` as the format checker; a test holds the two to that. Anything outside the
    subset raises `SchemaError` at compile time, never a wrong answer at run time.
    """

    def __init__(self, documents: Mapping[str, Any], *, lazy: bool = True) -> None:
        self._documents = documents
        self._refs: dict[str, Predicate] = {}
        # A reference met while compiling another one's target compiles (and loads its
        # definition) when a value first reaches it: a small document touches few of them.
        # `lazy=False` compiles everything at once (the tests that compile every schema).
        self._lazy = lazy
        self._depth = 0

    def compile(self, node: object, base: str) -> Predicate:
        """Compile `node`, whose relative references resolve against the document `base`."""
        if node is True:
            return _always
        if node is False:
            return _never
        if not isinstance(node, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {node!r}")
        unknown = {key for key in node if key not in _HANDLED and key not in _ANNOTATIONS}
        unknown = {key for key in unknown if not key.startswith("x-")}
        if unknown:
            raise SchemaError(f"unsupported keywords {sorted(unknown)}")
        checks: list[Predicate] = []
        if "$ref" in node:
            checks.append(self._ref(base, node["$ref"]))
        checks.extend(self._structure(node, base))
        checks.extend(self._scalars(node))
        for keyword in ("anyOf", "oneOf", "allOf"):
            if keyword in node:
                branches = tuple(self.compile(branch, base) for branch in node[keyword])
                checks.append(_combinator(keyword, branches))
        if "not" in node:
            negated = self.compile(node["not"], base)
            checks.append(lambda value: not negated(value))
        return _all_of(checks)

    def _structure(self, node: Manifest, base: str) -> list[Predicate]:
        """The type check fused with the object or array keywords."""
        types = node.get("type")
        type_list = (types,) if isinstance(types, str) else tuple(types or ())
        type_check = _type_check(type_list) if "type" in node else _always
        object_keywords = {"properties", "additionalProperties", "required"} & set(node)
        if object_keywords:
            properties = {
                name: self.compile(child, base)
                for name, child in node.get("properties", {}).items()
            }
            additional = node.get("additionalProperties", True)
            others = type_check if "object" not in type_list else _without("object", type_list)
            if "type" not in node:
                others = _always
            return [
                _object_check(
                    others,
                    properties,
                    None if additional is True else self.compile(additional, base),
                    tuple(node.get("required", ())),
                )
            ]
        array_keywords = {"items", "minItems", "maxItems"} & set(node)
        if array_keywords:
            others = type_check if "array" not in type_list else _without("array", type_list)
            if "type" not in node:
                others = _always
            items = self.compile(node.get("items", True), base)
            return [
                _array_check(others, items, node.get("minItems", 0), node.get("maxItems", math.inf))
            ]
        return [] if "type" not in node else [type_check]

    def _scalars(self, node: Manifest) -> list[Predicate]:
        checks: list[Predicate] = []
        if "enum" in node:
            checks.append(_enum_check(node["enum"]))
        if "const" in node:
            checks.append(_enum_check([node["const"]]))
        if "minLength" in node or "maxLength" in node:
            checks.append(_length_check(node.get("minLength", 0), node.get("maxLength", math.inf)))
        if "minimum" in node or "maximum" in node:
            checks.append(
                _range_check(node.get("minimum", -math.inf), node.get("maximum", math.inf))
            )
        if "pattern" in node:
            checks.append(_pattern_check(node["pattern"]))
        if node.get("format") in _FORMATS:
            checks.append(_FORMATS[node["format"]])
        return checks

    def _ref(self, base: str, ref: str) -> Predicate:
        uri, _, fragment = ref.partition("#")
        uri = uri or base
        key = f"{uri}#{fragment}"
        known = self._refs.get(key)
        if known is not None:
            return known
        if uri not in self._documents:
            raise SchemaError(f"unresolvable reference {ref!r}")
        if self._lazy and self._depth:
            return self._deferred(key, ref, uri, fragment)
        # A stand-in first, so that recursive definitions terminate.
        cell: list[Predicate] = []
        self._refs[key] = lambda value: cell[0](value)
        compiled = self._target(ref, uri, fragment)
        cell.append(compiled)
        self._refs[key] = compiled
        return compiled

    def _deferred(self, key: str, ref: str, uri: str, fragment: str) -> Predicate:
        """A predicate that compiles the reference's target on its first call."""
        cell: list[Predicate] = []

        def check(value: object) -> bool:
            if not cell:
                cell.append(self._target(ref, uri, fragment))
                self._refs[key] = cell[0]
            return cell[0](value)

        self._refs[key] = check
        return check

    def _target(self, ref: str, uri: str, fragment: str) -> Predicate:
        target: object = self._documents[uri]
        for part in fragment.split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise SchemaError(f"unresolvable reference {ref!r}")
            target = target[part]
        self._depth += 1
        try:
            return self.compile(target, uri)
        finally:
            self._depth -= 1


def _without(name: str, types: tuple[str, ...]) -> Predicate:
    rest = tuple(kind for kind in types if kind != name)
    return _type_check(rest)


def _combinator(keyword: str, branches: tuple[Predicate, ...]) -> Predicate:
    if keyword == "anyOf":
        return _any_of(branches)
    if keyword == "allOf":
        return lambda value: all(branch(value) for branch in branches)
    return lambda value: sum(1 for branch in branches if branch(value)) == 1


class _Documents(Mapping[str, Any]):
    """The documents references resolve in, by URI: each loaded when first resolved."""

    def __init__(self, version: tuple[int, int]) -> None:
        self._version = version
        self._ray = {f"{_RAY_ID_PREFIX}{Path(f).stem}": kind for kind, f in RAY_KINDS.items()}

    def __getitem__(self, uri: str) -> Any:
        if uri == K8S_DEFINITIONS_URI:
            return {"$defs": _k8s_lazy_definitions(self._version)}
        schema = _linked_schema(self._ray[uri])
        if schema.get("$id") != uri:  # pragma: no cover - the packaged schemas' ids
            raise SchemaError(f"the schema of {self._ray[uri]} is not {uri}")
        return schema

    def __contains__(self, uri: object) -> bool:
        return uri == K8S_DEFINITIONS_URI or uri in self._ray

    def __iter__(self) -> Iterator[str]:
        return iter((K8S_DEFINITIONS_URI, *self._ray))

    def __len__(self) -> int:
        return 1 + len(self._ray)


@functools.cache
def _compiler(version: tuple[int, int]) -> _Compiler:
    """One compiler per Kubernetes version, so shared definitions compile once."""
    return _Compiler(_Documents(version))


@functools.cache
def _predicate(version: tuple[int, int], ref: str) -> Predicate:
    return _compiler(version).compile({"$ref": ref}, K8S_DEFINITIONS_URI)


# --- explaining failures (jsonschema, imported only here) ---------------------------------


@functools.cache
def _explainer(version: tuple[int, int], ref: str) -> Validator:
    from jsonschema import Draft202012Validator
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    documents = [(K8S_DEFINITIONS_URI, _k8s_definitions(version))]
    documents += [(_linked_schema(kind)["$id"], _linked_schema(kind)) for kind in RAY_KINDS]
    registry: Registry[Any] = Registry().with_resources(
        (uri, DRAFT202012.create_resource(document)) for uri, document in documents
    )
    return Draft202012Validator({"$ref": ref}, registry=registry, format_checker=_format_checker())


@functools.cache
def _format_checker() -> FormatChecker:
    from jsonschema import FormatChecker

    formats = FormatChecker(formats=())
    for name, check in _FORMATS.items():
        formats.checks(name)(check)
    return formats


def _run(version: tuple[int, int], ref: str, document: Manifest) -> list[Problem]:
    if _predicate(version, ref)(document):
        return []
    return _explain(_explainer(version, ref), document)


def _explain(validator: Validator, document: Manifest) -> list[Problem]:
    """All problems jsonschema finds, at most one per path, missing fields merged."""
    found: dict[JsonPath, str | list[str]] = {}
    for error in validator.iter_errors(document):
        for path, message, missing in _describe(error, document):
            known = found.get(path)
            if missing is None:
                found.setdefault(path, message)
            elif known is None:
                found[path] = [missing]
            elif isinstance(known, list) and missing not in known:
                known.append(missing)
    return [
        Problem(path, entry if isinstance(entry, str) else _missing_message(entry))
        for path, entry in found.items()
    ]


def _missing_message(names: list[str]) -> str:
    if len(names) == 1:
        return f"missing required field {show(names[0])}"
    return f"missing required fields {_join([show(name) for name in names], 'and')}"


def _join(words: list[str], last: str) -> str:
    if len(words) <= 1:
        return "".join(words)
    return f"{', '.join(words[:-1])} {last} {words[-1]}"


def _json_path(document: object, steps: Iterator[object] | Any) -> JsonPath:
    """The path of an error, with list indexes as ints and every mapping key as a string."""
    path: list[str | int] = []
    node: object = document
    for step in steps:
        if isinstance(node, list) and isinstance(step, int):
            path.append(step)
            node = node[step] if 0 <= step < len(node) else None
        elif isinstance(node, dict):
            path.append(step if isinstance(step, str) else str(step))
            node = node.get(step)
        else:  # pragma: no cover - jsonschema paths follow the instance
            path.append(str(step))
            node = None
    return tuple(path)


_Found = tuple[JsonPath, str, str | None]


def _describe(error: ValidationError, document: object) -> Iterator[_Found]:
    """Turn one jsonschema error into (path, message, missing field) triples."""
    schema: Manifest = error.schema if isinstance(error.schema, dict) else {}
    path = _json_path(document, error.absolute_path)
    keyword = error.validator
    instance = error.instance
    if "x-forbidden" in schema:
        yield path, str(schema["x-forbidden"]), None
        return
    custom = schema.get("x-messages", {}).get(keyword)
    if custom is not None:
        yield path, str(custom), None
        return
    required = error.validator_value
    if keyword == "required" and isinstance(instance, dict) and isinstance(required, list):
        for name in required:
            if name not in instance:
                yield path, "", str(name)
        return
    if keyword == "additionalProperties" and isinstance(instance, dict):
        known = list(schema.get("properties", {}))
        for key in instance:
            if key not in known:
                hint = _suggest(key, [name for name in known if name not in instance])
                yield (*path, str(key)), f"unknown field {show(key)}{hint}", None
        return
    if keyword in ("anyOf", "oneOf") and error.context:
        yield from _describe_alternatives(error, document, path)
        return
    yield path, _message(keyword, error.validator_value, instance, schema), None


def _describe_alternatives(
    error: ValidationError, document: object, path: JsonPath
) -> Iterator[_Found]:
    """Explain a failed `anyOf`/`oneOf` by its most relevant alternative."""
    by_branch: dict[object, list[ValidationError]] = {}
    for sub in error.context or ():
        by_branch.setdefault(sub.relative_schema_path[0], []).append(sub)
    type_misses = {
        branch
        for branch, subs in by_branch.items()
        if any(sub.validator == "type" and not sub.relative_path for sub in subs)
    }
    if type_misses == set(by_branch):
        expected: list[str] = []
        for subs in by_branch.values():
            for sub in subs:
                if sub.validator == "type" and not sub.relative_path:
                    expected += _strings(sub.validator_value)
        yield path, f"expected {_expected_types(expected)}, got {show(error.instance)}", None
        return
    candidates = [
        sub for branch, subs in by_branch.items() if branch not in type_misses for sub in subs
    ]
    deepest = max(candidates, key=lambda sub: len(sub.relative_path))
    yield from _describe(deepest, document)


def _strings(value: object) -> list[str]:
    """The strings of a keyword value that is a string or a list of strings."""
    return [value] if isinstance(value, str) else [str(item) for item in _as_list(value)]


def _as_list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _expected_types(types: object) -> str:
    names = list(_strings(types))
    unique = list(dict.fromkeys(names))
    if len(unique) > 1 and "null" in unique:
        unique.remove("null")
    return _join([_TYPE_NAMES.get(name, name) for name in unique], "or")


def _message(keyword: object, value: Any, instance: object, schema: Manifest) -> str:
    """The message for one failed keyword: what was expected, and what was found."""
    got = show(instance)
    if keyword == "type":
        return f"expected {_expected_types(value)}, got {got}"
    if keyword == "enum":
        if len(value) == 1:
            return f"expected {show(value[0])}, got {got}"
        return f"expected one of {', '.join(show(item) for item in value)}, got {got}"
    if keyword == "const":
        return f"expected {show(value)}, got {got}"
    if keyword in ("minimum", "maximum"):
        return f"expected {_range_text(schema)}, got {got}"
    if keyword == "format":
        return f"expected a {value.removeprefix('int')}-bit integer, got {got}"
    if keyword == "pattern":
        expected = schema.get("x-expected") or f"a string matching {show(value)}"
        return f"expected {expected}, got {got}"
    if keyword == "minLength" and value == 1:
        return f"expected a non-empty string, got {got}"
    if keyword in ("minLength", "maxLength") and isinstance(instance, str):
        bound = "at least" if keyword == "minLength" else "at most"
        return f"expected {bound} {_count(value, 'character')}, got {len(instance)}"
    if keyword in ("minItems", "maxItems") and isinstance(instance, list):
        bound = "at least" if keyword == "minItems" else "at most"
        return f"expected {bound} {_count(value, 'item')}, got {len(instance)}"
    if keyword == "oneOf":
        return f"expected exactly one alternative to match, got {got}"
    return f"unexpected value {got}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _range_text(schema: Manifest) -> str:
    noun = "an integer" if schema.get("type") == "integer" else "a number"
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        return f"{noun} from {low} to {high}"
    if low is not None:
        return f"{noun} of at least {low}"
    return f"{noun} of at most {high}"


def _suggest(word: object, candidates: list[str]) -> str:
    """`; did you mean "x"?` for the nearest candidate, or nothing."""
    if not isinstance(word, str) or not candidates:
        return ""
    lowered = {candidate.lower(): candidate for candidate in candidates}
    match = lowered.get(word.lower())
    if match is None:
        import difflib  # only to suggest a fix for a misspelt field

        close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.7)
        match = lowered[close[0]] if close else None
    return f"; did you mean {show(match)}?" if match else ""


# --- the public entry points ---------------------------------------------------------------


def _header(document: object) -> tuple[str, str] | list[Problem]:
    """The document's apiVersion and kind, or the problems that prevent reading them."""
    if not isinstance(document, dict):
        return [Problem((), f"expected an object with apiVersion and kind, got {show(document)}")]
    problems: list[Problem] = []
    missing = [field for field in ("apiVersion", "kind") if field not in document]
    if missing:
        problems.append(Problem((), _missing_message(missing)))
    for field in ("apiVersion", "kind"):
        value = document.get(field)
        if field in document and not (isinstance(value, str) and value):
            problems.append(Problem((field,), f"expected a non-empty string, got {show(value)}"))
    if problems:
        return problems
    return document["apiVersion"], document["kind"]


def check(
    document: Manifest, *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
) -> list[Problem]:
    """Check a ray.io document against its schema; other API groups give no problems.

    Embedded Kubernetes types are checked against the OpenAPI schemas of `kubernetes_version`
    (the newest shipped version not newer than it).

    Raises:
        ValueError: `kubernetes_version` is malformed or older than every shipped schema.
    """
    value: object = document
    header = _header(value)
    if isinstance(header, list):
        return header
    api_version, kind = header
    if api_version.partition("/")[0] != RAY_GROUP or "/" not in api_version:
        return []
    problems: list[Problem] = []
    if api_version == "ray.io/v1alpha1":
        problems.append(
            Problem(
                ("apiVersion",),
                f"unsupported apiVersion {show(api_version)}; "
                f'migrate the manifest to "{RAY_API_VERSION}"',
            )
        )
    elif api_version != RAY_API_VERSION:
        problems.append(
            Problem(
                ("apiVersion",),
                f'unsupported apiVersion {show(api_version)}; expected "{RAY_API_VERSION}"',
            )
        )
    if kind not in RAY_KINDS:
        expected = _join(list(RENDERED_KINDS), "or")
        hint = _suggest(kind, list(RAY_KINDS))
        problems.append(
            Problem(
                ("kind",),
                f"unsupported kind {show(kind)} in {RAY_API_VERSION}; expected {expected}{hint}",
            )
        )
    if problems:
        return problems
    version = _resolve_version(kubernetes_version)
    return _run(version, _linked_schema(kind)["$id"], document)


def check_kubernetes_object(
    obj: Manifest, *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
) -> list[Problem]:
    """Check a whole Kubernetes object (Pod, Service, ...) against the OpenAPI schemas.

    ray.io objects go to `check`. Objects of API groups that Kubernetes itself does not serve
    (custom resources) give no problems: they are not ours to check.

    Raises:
        ValueError: `kubernetes_version` is malformed or older than every shipped schema.
    """
    value: object = obj
    header = _header(value)
    if isinstance(header, list):
        return header
    api_version, kind = header
    group, _, group_version = api_version.rpartition("/")
    if group == RAY_GROUP:
        return check(obj, kubernetes_version=kubernetes_version)
    version = _resolve_version(kubernetes_version)
    kinds = _k8s_kinds(version)
    name = kinds.get((group, group_version, kind))
    if name is not None:
        return _run(version, f"{K8S_DEFINITIONS_URI}#/$defs/{name}", obj)
    if group not in {known_group for known_group, _, _ in kinds}:
        return []
    served = sorted({f"{g}/{v}" if g else v for g, v, k in kinds if g == group and k == kind})
    release = f"{version[0]}.{version[1]}"
    if served:
        expected = _join([show(item) for item in served], "or")
        return [
            Problem(
                ("apiVersion",),
                f"unsupported apiVersion {show(api_version)} for {kind} in Kubernetes {release}; "
                f"expected {expected}",
            )
        ]
    hint = _suggest(kind, sorted({k for g, _, k in kinds if g == group}))
    return [
        Problem(
            ("kind",), f"unknown kind {show(kind)} in {api_version} (Kubernetes {release}){hint}"
        )
    ]
