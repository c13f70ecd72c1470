"""The compiler: documents in, ordered Kubernetes objects out.

Holds the table of kinds (each a `kinds.pipeline` run) and the driver: the schema and the
structural checks of each document, dispatch by kind, every problem of every document
collected before anything is returned, two objects with one identity rejected, the result
ordered by kind rank, namespace and name. Pure: no files, clock or environment.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from renderer import schemas
from renderer.errors import Diagnostic, ManifestError, Origin, Problem, show
from renderer.kinds import pipeline, raycluster, rayjob, rayservice
from renderer.manifest import Manifest
from renderer.model.document import Document, ObjectKey
from renderer.options import RenderOptions

Builder = Callable[[Manifest, RenderOptions], tuple[list[Problem], list[Manifest]]]

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


def _not_supported(kind: str, issue: str) -> Builder:
    def build(doc: Manifest, options: RenderOptions) -> tuple[list[Problem], list[Manifest]]:
        return [Problem(("kind",), f"{kind} is not supported yet by kuberay render ({issue})")], []

    return build


# One pipeline per kind, all of one shape (`kinds.pipeline`).
BUILDERS: dict[str, Builder] = {
    "RayCluster": functools.partial(pipeline.run, raycluster.KIND),
    "RayJob": functools.partial(pipeline.run, rayjob.KIND),
    "RayService": functools.partial(pipeline.run, rayservice.KIND),
    "RayCronJob": _not_supported("RayCronJob", "render a RayJob and schedule it yourself"),
}


def _pass_through(data: Manifest, options: RenderOptions) -> tuple[list[Problem], list[Manifest]]:
    problems: list[Problem] = []
    meta = data.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        problems.append(Problem(("metadata", "name"), 'missing required field "name"'))
    return problems, [] if problems else [data]


def compile_document(data: Any, options: RenderOptions) -> tuple[list[Problem], list[Manifest]]:
    """Check and build one document; problems carry paths inside it."""
    if not isinstance(data, dict):
        return [Problem((), f"expected a Kubernetes object (a mapping), got {show(data)}")], []
    problems: list[Problem] = []
    for field in ("apiVersion", "kind"):
        if not isinstance(data.get(field), str) or not data.get(field):
            problems.append(Problem((field,), f'missing required field "{field}"'))
    if problems:
        return problems, []
    group = str(data["apiVersion"]).partition("/")[0] if "/" in data["apiVersion"] else ""
    if group != RAY_GROUP:
        return _pass_through(data, options)
    problems = schemas.check(data, kubernetes_version=options.kubernetes_version)
    meta = data.get("metadata")
    if isinstance(meta, dict) and "generateName" in meta and "name" not in meta:
        # One line for one mistake: the generateName problem says a fixed name is needed.
        problems = [p for p in problems if p.path != ("metadata",) or '"name"' not in p.message]
    problems.extend(_null_items(data, ()))
    errors = [p for p in problems if p.severity == "error"]
    builder = BUILDERS.get(str(data["kind"]))
    if builder is None:  # schemas.check has reported the unknown kind already
        return problems, []
    name = (
        (data.get("metadata") or {}).get("name") if isinstance(data.get("metadata"), dict) else None
    )
    if errors and not (all(p.path[:2] in _NAME_PATHS for p in errors) and isinstance(name, str)):
        return problems, []
    # A bad name or namespace alone still lets the semantic rules run, so that the user
    # sees every problem of the spec at once; nothing is built.
    more, objects = builder(without_nulls(data), options)
    return problems + more, [] if errors else objects


def render(documents: Sequence[Document], options: RenderOptions | None = None) -> RenderResult:
    """Compile every document; raise ManifestError listing every problem if there is any error."""
    options = options or RenderOptions()
    diagnostics: list[Diagnostic] = []
    built: list[tuple[Manifest, Origin]] = []
    for document in documents:
        if document.data is None:
            continue  # an empty document, e.g. a trailing `---`
        origin = document.origin
        if isinstance(document.data, dict):
            origin = dataclasses.replace(origin, context=_context(document.data, options))
        problems, objects = compile_document(document.data, options)
        diagnostics.extend(Diagnostic(origin, p) for p in problems)
        built.extend((obj, origin) for obj in objects)
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
