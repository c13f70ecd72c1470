"""The `kuberay` command group in click: `render`, `validate` and the plugin commands.

Owns the options, their help and click's usage errors; what a command writes and its exit
code (0 success, 1 differences, 2 usage error or invalid input, 3 internal error) are
`renderer.commands`'. A plain render or validate starts without click (`renderer.launch`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NoReturn, TypeVar

import click

from renderer import commands, settings, sources
from renderer.options import (
    BATCH_SCHEDULERS,
    DEFAULT_MAX_OBJECTS,
    DEFAULT_MAX_PODS,
    DEFAULT_SYNCER_NAMESPACE,
)

EXIT_OK: Final = commands.EXIT_OK
EXIT_DIFFERENT: Final = commands.EXIT_DIFFERENT
EXIT_INVALID: Final = commands.EXIT_INVALID
EXIT_INTERNAL: Final = commands.EXIT_INTERNAL


def _usage(problem: ValueError) -> NoReturn:
    """Show a usage problem of a command body as click does (`Error: ...` after the usage)."""
    if isinstance(problem, settings.SettingError) and not problem.usage:
        raise click.BadParameter(str(problem)) from None
    raise click.UsageError(str(problem)) from None


_OPTION_DECORATORS = (
    click.option(
        "--feature-gates",
        metavar="NAME=BOOL,...",
        help="KubeRay feature gates, e.g. RayClusterNetworkPolicy=true (KubeRay's defaults "
        "otherwise).",
    ),
    click.option(
        "--cluster-domain",
        default="cluster.local",
        show_default=True,
        help="Kubernetes cluster domain (KubeRay's CLUSTER_DOMAIN).",
    ),
    click.option(
        "--namespace",
        "-n",
        default="default",
        show_default=True,
        help="Namespace for manifests that do not set one.",
    ),
    click.option(
        "--init-container-injection/--no-init-container-injection",
        default=True,
        show_default=True,
        help="Add KubeRay's wait-gcs-ready init container to workers.",
    ),
    click.option(
        "--probes-injection/--no-probes-injection",
        default=True,
        show_default=True,
        help="Add KubeRay's liveness and readiness probes.",
    ),
    click.option(
        "--login-shell/--no-login-shell",
        default=False,
        show_default=True,
        help="Run Ray containers with bash -l (KubeRay's ENABLE_LOGIN_SHELL).",
    ),
    click.option(
        "--head-cluster-ip-service/--headless-head-service",
        default=False,
        show_default=True,
        help="Give the head Service a cluster IP (KubeRay's ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE).",
    ),
    click.option(
        "--kubernetes-version",
        default="1.33",
        show_default=True,
        help="Kubernetes version whose OpenAPI schemas check embedded objects.",
    ),
    click.option(
        "--max-pods",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_PODS,
        show_default=True,
        help="Refuse a cluster with more worker Pods (replicas * numOfHosts over its groups).",
    ),
    click.option(
        "--max-objects",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_OBJECTS,
        show_default=True,
        help="Refuse a run that would render more objects.",
    ),
    click.option(
        "--max-input-bytes",
        type=click.IntRange(min=1),
        default=sources.DEFAULT_MAX_INPUT_BYTES,
        show_default=True,
        help="Refuse an input file (or stdin) larger than this, unread.",
    ),
    click.option(
        "--batch-scheduler",
        type=click.Choice(BATCH_SCHEDULERS),
        help="KubeRay's --batch-scheduler: add the scheduler's PodGroup and pod metadata.",
    ),
    click.option(
        "--enable-batch-scheduler",
        is_flag=True,
        help="(Deprecated in KubeRay) the same as --batch-scheduler volcano.",
    ),
    click.option(
        "--kai-podgroups",
        is_flag=True,
        help="Beyond KubeRay: emit a KAI PodGroup per cluster, since KAI's podgrouper cannot "
        "gang owner-less pods.",
    ),
    click.option(
        "--kueue-queue",
        metavar="NAME",
        help="Kueue LocalQueue: render each cluster's pods as one Kueue plain-pod group "
        "(a manifest's kueue.x-k8s.io/queue-name label does the same).",
    ),
    click.option(
        "--syncer-namespace",
        default=DEFAULT_SYNCER_NAMESPACE,
        show_default=True,
        help="Where kuberay-syncer runs: a DenyAll/DenyAllIngress networkPolicy of a RayJob's "
        "or RayService's cluster admits its pods to the dashboard port ('' for no such rule).",
    ),
    click.option(
        "--syncer-pod-label",
        "syncer_pod_labels",
        multiple=True,
        metavar="KEY=VALUE",
        help="A label of the syncer's pods, for that rule (repeatable; default "
        "app.kubernetes.io/name=kuberay-syncer).",
    ),
    click.option("--strict", is_flag=True, help="Fail on warnings too."),
    click.option(
        "--format",
        "output_format",
        type=click.Choice(["text", "github"]),
        default="text",
        show_default=True,
        help="How problems are printed: file:line:col lines, or GitHub Actions annotations "
        "(::error file=,line=,col=::).",
    ),
)


F = TypeVar("F", bound=Callable[..., None])


def _with_render_options(func: F) -> F:
    for decorator in reversed(_OPTION_DECORATORS):
        func = decorator(func)
    return func


PLUGIN_GROUP: Final = "kuberay.commands"


def _plugin(entry: Any) -> click.Command | None:
    try:
        command = entry.load()
    except ImportError:  # a plugin whose dependencies are missing: leave it out
        return None
    return command if isinstance(command, click.Command) else None


class _PluginGroup(click.Group):
    """A group whose plugin commands (`kuberay.commands` entry points) load on first use.

    `kuberay render` never reads the entry points, so it does not import the syncer or the
    `kubernetes` package; a plugin's module is imported only when its command is invoked,
    or when `--help` lists every command.
    """

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        from importlib import metadata  # imported only when a plugin is asked for

        for entry in metadata.entry_points(group=PLUGIN_GROUP):
            if entry.name == cmd_name and (command := _plugin(entry)) is not None:
                self.add_command(command, entry.name)
                return command
        return None

    def list_commands(self, ctx: click.Context) -> list[str]:
        _load_plugins()
        return super().list_commands(ctx)


@click.group(cls=_PluginGroup)
@click.version_option(package_name="kuberay-gitops")
def main() -> None:
    """Compile KubeRay manifests into the plain Kubernetes objects KubeRay would create."""


def _load_plugins() -> None:
    """Add every plugin command now (e.g. `kuberay status` from the syncer)."""
    from importlib import metadata  # imported only here: see _PluginGroup

    for entry in metadata.entry_points(group=PLUGIN_GROUP):
        if entry.name not in main.commands and (command := _plugin(entry)) is not None:
            main.add_command(command, entry.name)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write one file per object, with a kustomization.yaml, into DIR.",
)
@click.option(
    "--check", is_flag=True, help="Write nothing; exit 1 if DIR differs from a fresh render."
)
@click.option("--diff", is_flag=True, help="Write nothing; print a unified diff against DIR.")
@click.option("--allow-empty", is_flag=True, help="Succeed even when nothing is rendered.")
@click.option(
    "--gitops-config",
    type=click.Choice(["argocd", "argocd-application", "argocd-cm", "flux"]),
    default=None,
    help="Print, instead of the objects, the Argo CD Application (and the argocd-cm health "
    "scripts) or the Flux Kustomization (with health checks) that let the syncer own the "
    "rendered HTTPRoutes' rules and show the jobs' and services' run-time health "
    "(argocd-application / argocd-cm: one of the two Argo CD objects).",
)
@_with_render_options
def render(paths: tuple[str, ...], **params: object) -> None:
    """Render RayCluster manifests (files, directories or - for stdin) into Kubernetes objects."""
    commands.run(commands.render, paths, params, on_usage=_usage)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@_with_render_options
def validate(paths: tuple[str, ...], **params: object) -> None:
    """Check manifests and report every problem, writing nothing."""
    commands.run(commands.validate, paths, params, on_usage=_usage)
