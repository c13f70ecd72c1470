"""The bodies of `kuberay render` and `kuberay validate`, without click.

The click commands (`renderer.cli`) and the fast start (`renderer.launch`) both run these:
what is written and which exit code. Exit codes: 0 success, 1 differences
(`--check`/`--diff`), 2 usage error or invalid input, 3 internal error (the only case
with a traceback). A usage error is raised as `UsageError` (or `settings.SettingError`)
before anything is written; the caller shows it (click, as a usage error).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, NoReturn, TextIO

from renderer import compile as compiler
from renderer import emit, settings, sources
from renderer.errors import Diagnostic, ManifestError, format_diagnostics, summary
from renderer.manifest import Manifest

EXIT_OK: Final = 0
EXIT_DIFFERENT: Final = 1
EXIT_INVALID: Final = 2
EXIT_INTERNAL: Final = 3


class ExitError(Exception):
    """Stop the command with this exit code (its output is already written)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class UsageError(ValueError):
    """Options that cannot go together (shown by the caller as a usage error)."""


def _echo(message: str) -> None:
    """A line on stderr, as `click.echo(message)` writes it."""
    if "\x1b" in message:  # click strips ANSI styles off a non-terminal: let it
        import click

        click.echo(message)
        return
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def report(diagnostics: Sequence[Diagnostic], err: TextIO, output_format: object = "text") -> None:
    """Write problems to `err`: file:line:col lines or GitHub annotations, then a summary."""
    if diagnostics:
        if output_format == "github":
            from renderer import ghformat

            err.write(ghformat.format_diagnostics(diagnostics) + "\n")
        else:
            err.write(format_diagnostics(diagnostics) + "\n")
        err.write(summary(diagnostics) + "\n")


def compile_paths(paths: Sequence[str], params: dict[str, object]) -> compiler.RenderResult:
    """Read and render `paths` with the command's parameters; problems end the command."""
    options = settings.render_options(params)
    max_bytes = params.get("max_input_bytes", sources.DEFAULT_MAX_INPUT_BYTES)
    documents, read_problems = sources.read_documents(
        paths,
        sys.stdin,
        max_bytes=int(max_bytes),  # type: ignore[call-overload]  # an int
    )
    try:
        result = compiler.render(documents, options)
    except ManifestError as exc:
        report([*read_problems, *exc.diagnostics], sys.stderr, params.get("output_format"))
        raise ExitError(EXIT_INVALID) from exc
    if read_problems:
        report([*read_problems, *result.warnings], sys.stderr, params.get("output_format"))
        raise ExitError(EXIT_INVALID)
    if result.warnings:
        report(result.warnings, sys.stderr, params.get("output_format"))
        if params.get("strict"):
            raise ExitError(EXIT_INVALID)
    return result


def _differences(files: dict[str, str], existing: dict[str, str]) -> list[str]:
    return sorted(
        name for name in set(files) | set(existing) if files.get(name) != existing.get(name)
    )


def render(paths: tuple[str, ...], params: dict[str, object]) -> None:
    """`kuberay render`: the YAML stream, the output directory (or its check) or a tool's config."""
    output_dir = params.get("output_dir")
    check, diff = bool(params.get("check")), bool(params.get("diff"))
    if (check or diff) and output_dir is None:
        raise UsageError("--check and --diff compare against a directory: add --output-dir DIR")
    result = compile_paths(paths, params)
    if not result.objects and not params.get("allow_empty"):
        _echo(
            "error: the input holds no objects to render (pass --allow-empty if that is expected)",
        )
        raise ExitError(EXIT_INVALID)
    tool = params.get("gitops_config")
    if tool is not None:
        if output_dir is not None:
            raise UsageError("--gitops-config prints one object; it cannot go with --output-dir")
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
        _echo(f"error: {exc}")
        raise ExitError(EXIT_INVALID) from exc
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
                    _echo(ghformat.command("error", hint, file=f"{directory}/{name}"))
                else:
                    _echo(f"{directory}/{name}: {state}")
        if changed:
            _echo(f"{len(changed)} file(s) differ from a fresh render of {directory}")
            raise ExitError(EXIT_DIFFERENT)
        return
    outdir.write_directory(directory, files, existing)


def validate(paths: tuple[str, ...], params: dict[str, object]) -> None:
    """`kuberay validate`: every problem, nothing written."""
    result = compile_paths(paths, params)
    _echo(f"ok: {len(result.objects)} objects would be rendered")


def run(
    action: Callable[..., None], *args: object, on_usage: Callable[[ValueError], NoReturn]
) -> None:
    """Run a command body, mapping outcomes to exit codes; only internal errors show a traceback.

    `on_usage` shows a usage error (`UsageError`, `settings.SettingError`) and exits.
    """
    try:
        action(*args)
    except ExitError as done:
        sys.exit(done.code)
    except (UsageError, settings.SettingError) as exc:
        on_usage(exc)
    except SystemExit:
        raise
    except Exception as exc:
        if type(exc).__module__.partition(".")[0] == "click":
            raise  # click's own exceptions are click's to show
        import traceback

        traceback.print_exc()
        _echo("internal error: please report this with the input that caused it")
        sys.exit(EXIT_INTERNAL)
