"""The one shape of a kind's pipeline, and the driver that runs it: check, parse, check, build.

Each kind module (`kinds.raycluster`, `kinds.rayjob`, `kinds.rayservice`) supplies the
same pure functions; `prepare` is the only place their order is written: the document's
rules, the `managedBy` guard (KubeRay skips an object another controller manages), parse
into the model, the model's rules; then `Prepared.build`. Nothing is built once a problem is
an error, and the compiler prepares every document before it builds any.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from renderer.errors import Problem, has_error
from renderer.manifest import Manifest
from renderer.objects import autoscaling
from renderer.options import RenderOptions
from renderer.rules.document import is_managed_by_kuberay

M = TypeVar("M")
Built = tuple[list[Problem], list[Manifest]]


@dataclass(frozen=True, slots=True)
class Kind(Generic[M]):
    """The four steps of one kind, over its model type `M`."""

    check: Callable[[Manifest, RenderOptions], list[Problem]]
    parse: Callable[[Manifest, RenderOptions], M]
    check_model: Callable[[M, RenderOptions], list[Problem]]
    build: Callable[[M, RenderOptions], Built]
    count_pods: Callable[[M], int]  # the Pods `build` will make: the bulk of the output
    # RayCluster's parse is total over any schema-valid spec, so its model rules still run
    # after a document rule failed (one run shows more); the other kinds' models need a
    # document their rules accepted.
    parse_despite_errors: bool = False


@dataclass(frozen=True, slots=True)
class Prepared(Generic[M]):
    """A document that passed every check, with its model: ready to build."""

    kind: Kind[M]
    model: M
    options: RenderOptions

    def estimate(self) -> int:
        """A lower bound of the objects `build` makes: its Pods and one more."""
        return self.kind.count_pods(self.model) + 1

    def build(self) -> Built:
        """The objects, and the problems only building finds (none built on an error)."""
        problems, objects = self.kind.build(self.model, self.options)
        # Autoscaled worker templates went through every step a Pod does; now they move
        # into their ConfigMap (objects.autoscaling).
        return problems, [] if has_error(problems) else autoscaling.fold_templates(objects)


def prepare(
    kind: Kind[M], doc: Manifest, options: RenderOptions
) -> tuple[list[Problem], Prepared[M] | None]:
    """Check a schema-valid document of `kind` and parse it; nothing to build on an error."""
    problems = kind.check(doc, options)
    if not is_managed_by_kuberay(doc.get("spec") or {}):
        return problems, None  # the rules said so (a warning, or the value's error)
    if has_error(problems) and not kind.parse_despite_errors:
        return problems, None
    model = kind.parse(doc, options)
    problems.extend(kind.check_model(model, options))
    if has_error(problems):
        return problems, None
    return problems, Prepared(kind, model, options)


def run(kind: Kind[M], doc: Manifest, options: RenderOptions) -> Built:
    """Check a schema-valid document of `kind` and build its objects (none on an error)."""
    problems, prepared = prepare(kind, doc, options)
    if prepared is None:
        return problems, []
    more, objects = prepared.build()
    return problems + more, objects
