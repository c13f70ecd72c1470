"""The fast start (`renderer.launch`) parses exactly what click parses, and gives way to
click for everything else: the same output, the same exit code, for every command line."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from renderer import cli, launch
from tests.paths import EXAMPLES, INVALID


def _kind(option: click.Option) -> set[str]:
    if option.is_flag and option.secondary_opts:
        return {"on", "off"}
    if option.is_flag:
        return {"flag"}
    if option.multiple:
        return {"many"}
    if isinstance(option.type, click.IntRange) and option.type.min == 1:
        return {"count"}
    if isinstance(option.type, click.Choice):
        return {"choice:" + "|".join(map(str, option.type.choices))}
    if isinstance(option.type, click.Path):
        assert not option.type.file_okay and not option.type.exists
        return {"path"}
    assert option.type == click.STRING, option.name
    return {"value"}


@pytest.mark.parametrize("command", ["render", "validate"])
def test_the_fast_start_knows_every_option_of_the_click_command(command: str) -> None:
    group: click.Group = cli.main
    click_command = group.commands[command]
    table = launch.OPTIONS[command]
    seen: set[str] = set()
    for option in click_command.params:
        if not isinstance(option, click.Option) or option.name == "help":
            continue
        names = [o for o in (*option.opts, *option.secondary_opts) if o.startswith("--")]
        kinds = {table[name][1] for name in names}
        assert kinds == _kind(option), option.name
        assert {table[name][0] for name in names} == {option.name}
        for short in (o for o in option.opts if not o.startswith("--")):
            assert launch.SHORT[short] in names
        seen.update(names)
    assert seen == set(table)


def outcome(
    entry: object, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[object, ...]:
    code: object = 0
    try:
        entry(argv)  # type: ignore[operator]
    except SystemExit as done:
        code = done.code or 0
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cases(tmp: Path) -> tuple[list[list[str]], list[list[str]]]:
    cluster, job = str(EXAMPLES / "raycluster.yaml"), str(EXAMPLES / "rayjob.yaml")
    a_file = tmp / "a-file"
    a_file.write_text("x")
    fast = [
        ["render", cluster],
        ["render", cluster, job, "-n", "team", "--cluster-domain=corp.local"],
        ["render", "--no-probes-injection", cluster, "--max-pods", "+7", "--login-shell"],
        ["render", cluster, "--batch-scheduler", "kai-scheduler", "--kai-podgroups"],
        ["render", cluster, "--syncer-namespace", "", "--syncer-pod-label", "a=b"],
        ["render", cluster, "--feature-gates", "RayClusterNetworkPolicy=true", "--strict"],
        ["render", cluster, "--gitops-config", "flux"],
        ["render", cluster, "-o", str(tmp / "out"), "--check"],
        ["render", cluster, "-o", str(tmp / "out"), "--diff", "--format", "github"],
        ["render", str(INVALID / "serve-port.yaml"), "--format=github"],
        ["render", str(INVALID / "serve-port.yaml"), cluster],
        ["render", str(tmp / "missing.yaml")],
        ["validate", job, "--kueue-queue", "q"],
        ["render", cluster, "--max-objects", "1"],
    ]
    declined = [
        [],
        ["--version"],
        ["render"],
        ["render", "--help"],
        ["render", cluster, "--no-such-option"],
        ["render", cluster, "--strict=yes"],
        ["render", cluster, "--max-pods", "0"],
        ["render", cluster, "--max-pods", "many"],
        ["render", cluster, "--batch-scheduler", "slurm"],
        ["render", cluster, "--namespace"],
        ["render", cluster, "-nteam"],
        ["render", cluster, "--check"],
        ["render", cluster, "-o", str(tmp / "out"), "--gitops-config", "flux"],
        ["render", cluster, "-o", str(a_file)],
        ["render", cluster, "--kai-podgroups"],
        ["render", cluster, "--enable-batch-scheduler", "--batch-scheduler", "volcano"],
        ["render", cluster, "--syncer-namespace", "Bad_NS"],
        ["render", cluster, "--syncer-pod-label", "app"],
        ["render", cluster, "--feature-gates", "Nope=true"],
        ["render", "--", cluster],
        ["validate", cluster, "--output-dir", str(tmp)],
    ]
    return fast, declined


def declines(argv: list[str]) -> bool:
    try:
        command, _, params = launch.parse(argv)
        launch._checked(command, params)
    except launch._DeclinedError:
        return True
    return False


def test_the_fast_start_and_click_give_the_same_outcome(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fast, declined = cases(tmp_path)
    outcomes: set[object] = set()
    for argv in fast:
        assert not declines(argv), argv  # taken by the fast start
        seen = outcome(launch.main, argv, capsys)
        outcomes.add(seen[0])
        assert seen == outcome(cli.main, argv, capsys), argv
    for argv in declined:
        assert declines(argv), argv
        assert outcome(launch.main, argv, capsys) == outcome(cli.main, argv, capsys), argv
    assert outcomes == {0, 1, 2}  # success, differences, invalid input: all compared
