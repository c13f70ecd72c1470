"""The `kuberay` command: `render` and `validate`.

The only module that writes output and chooses exit codes: 0 success, 1 differences
(`--check`/`--diff`), 2 usage error or invalid input, 3 internal error (the only case
with a traceback).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TextIO, TypeVar

import click

from renderer import compile as compiler
from renderer import emit, settings, sources
from renderer.errors import Diagnostic, ManifestError, format_diagnostics, summary
from renderer.manifest import Manifest
from renderer.options import (
    BATCH_SCHEDULERS,
    DEFAULT_MAX_OBJECTS,
    DEFAULT_MAX_PODS,
    DEFAULT_SYNCER_NAMESPACE,
    RenderOptions,
)

EXIT_OK: Final = 0
EXIT_DIFFERENT: Final = 1
EXIT_INVALID: Final = 2
EXIT_INTERNAL: Final = 3


class _ExitError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _options(params: dict[str, object]) -> RenderOptions:
    """The render options of a command's parameters; a bad value is a click usage error."""
    try:
        return settings.render_options(params)
    except settings.SettingError as exc:
        if exc.usage:
            raise click.UsageError(str(exc)) from None
        raise click.BadParameter(str(exc)) from None


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


def _report(diagnostics: Sequence[Diagnostic], err: TextIO, output_format: object = "text") -> None:
    if diagnostics:
        if output_format == "github":
            from renderer import ghformat

            err.write(ghformat.format_diagnostics(diagnostics) + "\n")
        else:
            err.write(format_diagnostics(diagnostics) + "\n")
        err.write(summary(diagnostics) + "\n")


def _compile(paths: Sequence[str], params: dict[str, object]) -> compiler.RenderResult:
    options = _options(params)
    max_bytes = params.get("max_input_bytes", sources.DEFAULT_MAX_INPUT_BYTES)
    documents, read_problems = sources.read_documents(
        paths,
        sys.stdin,
        max_bytes=int(max_bytes),  # type: ignore[call-overload]  # click IntRange
    )
    try:
        result = compiler.render(documents, options)
    except ManifestError as exc:
        _report([*read_problems, *exc.diagnostics], sys.stderr, params.get("output_format"))
        raise _ExitError(EXIT_INVALID) from exc
    if read_problems:
        _report([*read_problems, *result.warnings], sys.stderr, params.get("output_format"))
        raise _ExitError(EXIT_INVALID)
    if result.warnings:
        _report(result.warnings, sys.stderr, params.get("output_format"))
        if params.get("strict"):
            raise _ExitError(EXIT_INVALID)
    return result


def _run(action: object, *args: object) -> None:
    """Run a command body, mapping outcomes to exit codes; only internal errors show a traceback."""
    try:
        action(*args)  # type: ignore[operator]
    except _ExitError as done:
        sys.exit(done.code)
    except (click.ClickException, click.exceptions.Exit, SystemExit):
        raise
    except Exception:  # noqa: BLE001 - the one place that turns bugs into exit code 3
        import traceback

        traceback.print_exc()
        click.echo("internal error: please report this with the input that caused it", err=True)
        sys.exit(EXIT_INTERNAL)


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


def _differences(files: dict[str, str], existing: dict[str, str]) -> list[str]:
    return sorted(
        name for name in set(files) | set(existing) if files.get(name) != existing.get(name)
    )


def _render(paths: tuple[str, ...], params: dict[str, object]) -> None:
    output_dir = params.get("output_dir")
    check, diff = bool(params.get("check")), bool(params.get("diff"))
    if (check or diff) and output_dir is None:
        raise click.UsageError(
            "--check and --diff compare against a directory: add --output-dir DIR"
        )
    result = _compile(paths, params)
    if not result.objects and not params.get("allow_empty"):
        click.echo(
            "error: the input holds no objects to render (pass --allow-empty if that is expected)",
            err=True,
        )
        raise _ExitError(EXIT_INVALID)
    tool = params.get("gitops_config")
    if tool is not None:
        if output_dir is not None:
            raise click.UsageError(
                "--gitops-config prints one object; it cannot go with --output-dir"
            )
        _print_gitops(str(tool), result.objects)
        return
    if output_dir is None:
        sys.stdout.write(emit.dump_all(result.objects))
        return
    _to_directory(Path(str(output_dir)), result.objects, params)


# The modules below load only when their option is given (start-up, issue 11).


def _print_gitops(tool: str, objects: Sequence[Manifest]) -> None:
    from renderer import gitops

    if tool == "argocd":
        sys.stdout.write(emit.dump_all(gitops.argocd_objects(objects)))
    elif tool == "argocd-application":
        sys.stdout.write(emit.dump(gitops.argocd_fragment(objects)))
    elif tool == "argocd-cm":
        sys.stdout.write(emit.dump(gitops.argocd_health_config()))
    else:
        sys.stdout.write(emit.dump(gitops.flux_fragment(objects)))


def _to_directory(directory: Path, objects: Sequence[Manifest], params: dict[str, object]) -> None:
    """Write, check (`--check`) or diff (`--diff`) the one-file-per-object directory."""
    import difflib

    from renderer import ghformat, outdir, output

    check, diff = bool(params.get("check")), bool(params.get("diff"))
    files = output.plan_directory(objects)
    try:
        existing = outdir.owned_files(directory, "kuberay render")
    except outdir.ForeignDirectoryError as exc:
        click.echo(f"error: {exc}", err=True)
        raise _ExitError(EXIT_INVALID) from exc
    if check or diff:
        changed = _differences(files, existing)
        if diff:
            for name in changed:
                sys.stdout.writelines(
                    difflib.unified_diff(
                        existing.get(name, "").splitlines(keepends=True),
                        files.get(name, "").splitlines(keepends=True),
                        fromfile=f"{directory}/{name}",
                        tofile=f"{directory}/{name} (rendered)",
                    )
                )
        elif changed:
            for name in changed:
                state = (
                    "missing"
                    if name not in existing
                    else "stale"
                    if name not in files
                    else "differs"
                )
                if params.get("output_format") == "github":
                    hint = f"{state} from a fresh render: run kuberay render to update it"
                    click.echo(
                        ghformat.command("error", hint, file=f"{directory}/{name}"), err=True
                    )
                else:
                    click.echo(f"{directory}/{name}: {state}", err=True)
        if changed:
            click.echo(
                f"{len(changed)} file(s) differ from a fresh render of {directory}", err=True
            )
            raise _ExitError(EXIT_DIFFERENT)
        return
    outdir.write_directory(directory, files, existing)


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
    _run(_render, paths, params)


def _validate(paths: tuple[str, ...], params: dict[str, object]) -> None:
    result = _compile(paths, params)
    click.echo(f"ok: {len(result.objects)} objects would be rendered", err=True)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@_with_render_options
def validate(paths: tuple[str, ...], **params: object) -> None:
    """Check manifests and report every problem, writing nothing."""
    _run(_validate, paths, params)
