"""The compiler: documents in, ordered Kubernetes objects out.

Holds the table of kinds (each a `kinds.pipeline` run) and the driver: the schema and the
structural checks of each document, dispatch by kind, every problem of every document
collected before anything is returned, two objects with one identity rejected, the result
ordered by kind rank, namespace and name. Pure: no files, clock or environment.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Protocol

from renderer import schemas
from renderer.errors import Diagnostic, ManifestError, Origin, Problem, show
from renderer.kinds import pipeline
from renderer.manifest import Manifest
from renderer.model.document import Document, ObjectKey
from renderer.options import RenderOptions
from renderer.rules.document import Unchecked

# Dependencies first, the way GitOps tools and Helm apply them; unknown kinds sort after these.
KIND_ORDER: Final = (
    "Namespace",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Role",
    "RoleBinding",
    "Service",
    "NetworkPolicy",
    "Issuer",
    "Certificate",
    "Ingress",
    "Gateway",
    "HTTPRoute",
    "Deployment",
    "Pod",
    "Job",
)
_RANK: Final = {kind: rank for rank, kind in enumerate(KIND_ORDER)}
RAY_GROUP: Final = "ray.io"
_NAME_PATHS: Final = (("metadata", "name"), ("metadata", "namespace"))


@dataclass(frozen=True, slots=True)
class RenderResult:
    """The objects to write, in output order, and any warnings."""

    objects: tuple[Manifest, ...]
    warnings: tuple[Diagnostic, ...] = ()


def object_key(obj: Manifest) -> ObjectKey:
    """The identity of an output object."""
    meta = obj.get("metadata") or {}
    return ObjectKey(
        str(obj.get("apiVersion", "")),
        str(obj.get("kind", "")),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )


def sort_key(obj: Manifest) -> tuple[int, str, str, str, str]:
    """Kind rank, then API version and kind for unknown kinds, then namespace and name."""
    key = object_key(obj)
    return (_RANK.get(key.kind, len(_RANK)), key.kind, key.api_version, key.namespace, key.name)


def _context(data: Manifest, options: RenderOptions) -> str:
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    name = (meta or {}).get("name") or "<no name>"
    namespace = (meta or {}).get("namespace") or options.namespace
    return f"{data.get('kind') or '<no kind>'} {namespace}/{name}"


def _null_items(value: Any, path: tuple[str | int, ...]) -> list[Problem]:
    """Null list items: the Kubernetes schemas let them through, the API server does not."""
    found: list[Problem] = []
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(_null_items(child, (*path, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            if child is None:
                found.append(Problem((*path, index), "expected a value, got null"))
            else:
                found.extend(_null_items(child, (*path, index)))
    return found


def without_nulls(value: Any) -> Any:
    """A copy without null-valued keys: the API server stores `field: null` as unset."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


class _Ready(Protocol):
    """A checked document, ready to build."""

    def estimate(self) -> int:
        """A lower bound of the objects `build` makes."""
        ...  # pragma: no cover - a protocol

    def build(self) -> tuple[list[Problem], list[Manifest]]:
        """The objects, and the problems only building finds."""
        ...  # pragma: no cover - a protocol


@dataclass(frozen=True, slots=True)
class _PassThrough:
    """An object that is not KubeRay's: written out as it is."""

    data: Manifest

    def estimate(self) -> int:
        return 1

    def build(self) -> tuple[list[Problem], list[Manifest]]:
        return [], [self.data]


# One pipeline per kind, all of one shape (`kinds.pipeline`), each module loaded when a
# document of its kind first comes (a small file renders without the other kinds' code).
_KIND_MODULES: Final = {
    "RayCluster": "renderer.kinds.raycluster",
    "RayJob": "renderer.kinds.rayjob",
    "RayService": "renderer.kinds.rayservice",
}


def kind_pipeline(kind: str) -> pipeline.Kind[Any] | None:
    """The pipeline of `kind`, or None for a kind the renderer does not build."""
    module = _KIND_MODULES.get(kind)
    if module is None:
        return None
    found: pipeline.Kind[Any] = importlib.import_module(module).KIND
    return found


_NOT_SUPPORTED: Final = {"RayCronJob": "render a RayJob and schedule it yourself"}
# Where each kind keeps its worker groups: a group the schema refuses is left out of the
# rules, so that they still check the rest of the document (issue 16).
_GROUPS_AT: Final[dict[str, tuple[str, ...]]] = {
    "RayCluster": ("spec", "workerGroupSpecs"),
    "RayJob": ("spec", "rayClusterSpec", "workerGroupSpecs"),
    "RayService": ("spec", "rayClusterConfig", "workerGroupSpecs"),
}


def _pass_through(data: Manifest) -> tuple[list[Problem], _Ready | None]:
    meta = data.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        return [Problem(("metadata", "name"), 'missing required field "name"')], None
    return [], _PassThrough(data)


def _mask_groups(data: Manifest, kind: str, errors: list[Problem]) -> Manifest | None:
    """`data` with each worker group that has a schema error replaced by `Unchecked`.

    None when an error lies outside the worker groups (and outside the name): the rules
    then skip the whole document, whose structure they cannot trust.
    """
    at = _GROUPS_AT[kind]
    broken: set[int] = set()
    for problem in errors:
        path = problem.path
        if path[:2] in _NAME_PATHS:
            continue
        if len(path) <= len(at) or path[: len(at)] != at or not isinstance(path[len(at)], int):
            return None
        broken.add(int(path[len(at)]))
    masked = dict(data)
    node = masked
    for key in at[:-1]:
        node[key] = dict(node[key])
        node = node[key]
    groups = list(node[at[-1]])
    for index in broken:
        name = groups[index].get("groupName") if isinstance(groups[index], dict) else None
        groups[index] = Unchecked({"groupName": name} if isinstance(name, str) else {})
    node[at[-1]] = groups
    return masked


def check_document(data: Any, options: RenderOptions) -> tuple[list[Problem], _Ready | None, bool]:
    """Check one document: its problems, what to build, and whether to keep what is built."""
    if not isinstance(data, dict):
        return (
            [Problem((), f"expected a Kubernetes object (a mapping), got {show(data)}")],
            None,
            False,
        )
    problems: list[Problem] = []
    for field in ("apiVersion", "kind"):
        if not isinstance(data.get(field), str) or not data.get(field):
            problems.append(Problem((field,), f'missing required field "{field}"'))
    if problems:
        return problems, None, False
    group = str(data["apiVersion"]).partition("/")[0] if "/" in data["apiVersion"] else ""
    if group != RAY_GROUP:
        problems, ready = _pass_through(data)
        return problems, ready, True
    problems = schemas.check(data, kubernetes_version=options.kubernetes_version)
    meta = data.get("metadata")
    if isinstance(meta, dict) and "generateName" in meta and "name" not in meta:
        # One line for one mistake: the generateName problem says a fixed name is needed.
        problems = [p for p in problems if p.path != ("metadata",) or '"name"' not in p.message]
    problems.extend(_null_items(data, ()))
    errors = [p for p in problems if p.severity == "error"]
    kind_name = str(data["kind"])
    if kind_name in _NOT_SUPPORTED:
        reason = _NOT_SUPPORTED[kind_name]
        message = f"{kind_name} is not supported yet by kuberay render ({reason})"
        return [*problems, Problem(("kind",), message)], None, False
    kind = kind_pipeline(kind_name)
    if kind is None:  # schemas.check has reported the unknown kind already
        return problems, None, False
    name = meta.get("name") if isinstance(meta, dict) else None
    if errors and not (all(p.path[:2] in _NAME_PATHS for p in errors) and isinstance(name, str)):
        masked = _mask_groups(without_nulls(data), kind_name, errors)
        if masked is None:
            return problems, None, False
        # Schema errors only inside worker groups: the rules check everything else.
        return problems + kind.check(masked, options), None, False
    # A bad name or namespace alone still lets the semantic rules run, so that the user
    # sees every problem of the spec at once; nothing is kept.
    more, ready = pipeline.prepare(kind, without_nulls(data), options)
    return problems + more, ready, not errors


def compile_document(data: Any, options: RenderOptions) -> tuple[list[Problem], list[Manifest]]:
    """Check and build one document; problems carry paths inside it."""
    problems, ready, keep = check_document(data, options)
    if ready is None:
        return problems, []
    more, objects = ready.build()
    return problems + more, objects if keep else []


@dataclass(slots=True)
class _Entry:
    origin: Origin
    problems: list[Problem]
    ready: _Ready | None
    keep: bool


def _limit_objects(entries: list[_Entry], options: RenderOptions) -> bool:
    """Refuse the run (at the document that crosses it) when it exceeds `max_objects`."""
    total = 0
    for entry in entries:
        if entry.ready is None:
            continue
        total += entry.ready.estimate()
        if total > options.max_objects:
            entry.problems.append(
                Problem(
                    ("metadata", "name"),
                    f"the documents up to this one would render at least {total} objects, more "
                    f"than the limit of {options.max_objects} per run; render fewer at once, or "
                    "raise the limit with --max-objects N",
                )
            )
            return False
    return True


def _input_head_images(
    documents: Sequence[Document], options: RenderOptions
) -> dict[tuple[str, str], str]:
    """The first head container image of every RayCluster document, by (namespace, name).

    A K8sJobMode RayJob with clusterSelector takes its submitter image from the selected
    cluster (rayjob.md §3.1.2); when that cluster is rendered in the same run, it is known.
    """
    heads: dict[tuple[str, str], str] = {}
    for document in documents:
        data = document.data
        if not isinstance(data, dict) or data.get("kind") != "RayCluster":
            continue
        if str(data.get("apiVersion") or "").partition("/")[0] != RAY_GROUP:
            continue
        meta = data.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        namespace = (meta.get("namespace") if isinstance(meta, dict) else None) or options.namespace
        try:
            image = data["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(name, str) and isinstance(namespace, str) and isinstance(image, str):
            heads[(namespace, name)] = image
    return heads


def render(documents: Sequence[Document], options: RenderOptions | None = None) -> RenderResult:
    """Compile every document; raise ManifestError listing every problem if there is any error.

    Every document is checked before any is built, and the run is refused before building
    when it would exceed `options.max_objects`.
    """
    options = options or RenderOptions()
    heads = _input_head_images(documents, options)
    if heads:
        options = dataclasses.replace(options, input_head_images=MappingProxyType(heads))
    entries: list[_Entry] = []
    for document in documents:
        if document.data is None:
            continue  # an empty document, e.g. a trailing `---`
        origin = document.origin
        if isinstance(document.data, dict):
            origin = dataclasses.replace(origin, context=_context(document.data, options))
        problems, ready, keep = check_document(document.data, options)
        entries.append(_Entry(origin, problems, ready, keep))
    built: list[tuple[Manifest, Origin]] = []
    if _limit_objects(entries, options):
        for entry in entries:
            if entry.ready is not None:
                more, objects = entry.ready.build()
                entry.problems.extend(more)
                if entry.keep:
                    built.extend((obj, entry.origin) for obj in objects)
    diagnostics = [Diagnostic(e.origin, p) for e in entries for p in e.problems]
    seen: dict[ObjectKey, Origin] = {}
    for obj, origin in built:
        key = object_key(obj)
        if key in seen:
            first = seen[key]
            diagnostics.append(
                Diagnostic(
                    origin,
                    Problem(
                        ("metadata", "name"),
                        f"{key.kind} {key.namespace or '<cluster>'}/{key.name} is produced twice "
                        f"(also by document {first.index} of {first.file})",
                    ),
                )
            )
        else:
            seen[key] = origin
    if any(d.problem.severity == "error" for d in diagnostics):
        raise ManifestError(diagnostics)
    ordered = sorted((obj for obj, _ in built), key=sort_key)
    return RenderResult(objects=tuple(ordered), warnings=tuple(diagnostics))
