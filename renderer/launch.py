"""The `kuberay` console script: a plain `render` or `validate` starts without click.

Importing click costs about a sixth of a small render's start-up (issue 11), and hooks,
the KRM function's neighbours and the Argo CD plugin start `kuberay` once per call. So a
command line made only of the forms this module parses exactly as click would (`render`
or `validate`, paths, long options with `VALUE` or `=VALUE`, `-o DIR`, `-n NS`, flags)
runs `renderer.commands` directly. Anything else (help, `--version`, the plugin commands,
an unknown or malformed option, a value click would refuse, options that cannot go
together) goes to the click group in `renderer.cli` untouched, which then prints exactly
what it always printed. A test holds `OPTIONS` to the click commands' options.
"""

from __future__ import annotations

import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NoReturn

from renderer.options import BATCH_SCHEDULERS

# Long flag -> (parameter, kind). Kinds: "value" (one string), "count" (an integer >= 1,
# click.IntRange(min=1)), "choice:a|b" (one of), "path" (a directory: click.Path with
# file_okay=False), "many" (repeatable value), "flag" (True), "on"/"off" (a boolean pair).
_RENDER_SETTINGS: Final = {
    "--feature-gates": ("feature_gates", "value"),
    "--cluster-domain": ("cluster_domain", "value"),
    "--namespace": ("namespace", "value"),
    "--init-container-injection": ("init_container_injection", "on"),
    "--no-init-container-injection": ("init_container_injection", "off"),
    "--probes-injection": ("probes_injection", "on"),
    "--no-probes-injection": ("probes_injection", "off"),
    "--login-shell": ("login_shell", "on"),
    "--no-login-shell": ("login_shell", "off"),
    "--head-cluster-ip-service": ("head_cluster_ip_service", "on"),
    "--headless-head-service": ("head_cluster_ip_service", "off"),
    "--kubernetes-version": ("kubernetes_version", "value"),
    "--max-pods": ("max_pods", "count"),
    "--max-objects": ("max_objects", "count"),
    "--max-input-bytes": ("max_input_bytes", "count"),
    "--batch-scheduler": ("batch_scheduler", "choice:" + "|".join(BATCH_SCHEDULERS)),
    "--enable-batch-scheduler": ("enable_batch_scheduler", "flag"),
    "--kai-podgroups": ("kai_podgroups", "flag"),
    "--kueue-queue": ("kueue_queue", "value"),
    "--syncer-namespace": ("syncer_namespace", "value"),
    "--syncer-pod-label": ("syncer_pod_labels", "many"),
    "--strict": ("strict", "flag"),
    "--format": ("output_format", "choice:text|github"),
}
OPTIONS: Final = {
    "render": {
        "--output-dir": ("output_dir", "path"),
        "--check": ("check", "flag"),
        "--diff": ("diff", "flag"),
        "--allow-empty": ("allow_empty", "flag"),
        "--gitops-config": ("gitops_config", "choice:argocd|argocd-application|argocd-cm|flux"),
        **_RENDER_SETTINGS,
    },
    "validate": _RENDER_SETTINGS,
}
SHORT: Final = {"-o": "--output-dir", "-n": "--namespace"}


class _DeclinedError(Exception):
    """The command line is not one the fast start parses exactly as click: click takes it."""


def _convert(kind: str, value: str) -> object:
    if kind == "count":
        try:
            number = int(value)
        except ValueError:
            raise _DeclinedError from None
        if number < 1:
            raise _DeclinedError
        return number
    if kind.startswith("choice:") and value not in kind.removeprefix("choice:").split("|"):
        raise _DeclinedError
    if kind == "path":
        try:
            if stat.S_ISREG(Path(value).stat().st_mode):
                raise _DeclinedError  # click: "Directory ... is a file."
        except OSError:
            pass
    return value


def parse(argv: Sequence[str]) -> tuple[str, tuple[str, ...], dict[str, object]]:
    """The command, its paths and the parameters click would pass (only those given).

    Raises:
        _DeclinedError: click must parse this command line.
    """
    if not argv or argv[0] not in OPTIONS:
        raise _DeclinedError
    table = OPTIONS[argv[0]]
    paths: list[str] = []
    params: dict[str, object] = {}
    rest = list(argv[1:])
    while rest:
        token = rest.pop(0)
        if token == "-" or not token.startswith("-"):
            paths.append(token)
            continue
        name, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        name = SHORT.get(name, name) if not eq else name
        if name not in table:
            raise _DeclinedError  # --help, --, unknown options, -xVALUE forms
        param, kind = table[name]
        if kind in ("flag", "on", "off"):
            if eq:
                raise _DeclinedError  # click: "option does not take a value"
            params[param] = kind != "off"
            continue
        if eq:
            value = inline
        elif rest and not rest[0].startswith("-"):
            value = rest.pop(0)
        else:
            raise _DeclinedError  # no value, or one that looks like an option
        if kind == "many":
            params[param] = (*params.get(param, ()), value)  # type: ignore[misc]
        else:
            params[param] = _convert(kind, value)
    if not paths:
        raise _DeclinedError  # click: "Missing argument 'PATHS...'"
    return argv[0], tuple(paths), params


def _checked(command: str, params: dict[str, object]) -> None:
    """Decline what a command body would refuse as a usage error (click words those)."""
    from renderer import settings

    if (params.get("check") or params.get("diff")) and params.get("output_dir") is None:
        raise _DeclinedError
    if params.get("gitops_config") is not None and params.get("output_dir") is not None:
        raise _DeclinedError
    try:
        settings.render_options(params)
    except settings.SettingError:
        raise _DeclinedError from None


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `kuberay` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        command, paths, params = parse(args)
        _checked(command, params)
    except _DeclinedError:
        from renderer import cli

        cli.main(args)
        return
    from renderer import commands

    body = commands.render if command == "render" else commands.validate
    try:
        commands.run(body, paths, params, on_usage=_unexpected)
    except KeyboardInterrupt:  # as click's standalone mode shows an interrupt
        sys.stderr.write("\nAborted!\n")
        sys.exit(1)


def _unexpected(problem: ValueError) -> NoReturn:  # pragma: no cover - `_checked` declines these
    raise RuntimeError(f"a usage problem the fast start should have declined: {problem}")
