"""The command line's rarer paths: exit codes (STYLE §3) and the output directory (DESIGN §4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from renderer import cli
from renderer.cli import main
from tests.paths import GOLDEN

SAMPLE = (GOLDEN / "raycluster-sample" / "input.yaml").read_text()
MULTIKUEUE = SAMPLE.replace("spec:\n", "spec:\n  managedBy: kueue.x-k8s.io/multikueue\n", 1)


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin)


@pytest.mark.parametrize("gates", ["RayClusterMTLS", "RayClusterMTLS=yes", "RayClusterMTLS="])
def test_a_malformed_feature_gate_is_a_usage_error(gates: str) -> None:
    result = run("render", "-", "--feature-gates", gates, stdin=SAMPLE)
    assert result.exit_code == 2
    assert "expected Name=true or Name=false" in result.stderr


def test_feature_gates_are_case_insensitive_booleans_separated_by_commas() -> None:
    mtls = SAMPLE.replace("spec:\n", "spec:\n  tlsOptions: {enabled: true}\n", 1)
    result = run(
        "render", "-", "--feature-gates", "RayClusterMTLS=TRUE, RayCronJob=false", stdin=mtls
    )
    assert result.exit_code == 0, result.stderr
    assert "kind: Certificate" in result.stdout


def test_warnings_are_printed_and_fail_only_under_strict() -> None:
    # STYLE §3: "Warnings use the same form with `warning:`, and they fail the run only
    # under `--strict`."
    relaxed = run("render", "-", "--allow-empty", stdin=MULTIKUEUE)
    assert relaxed.exit_code == 0
    assert ": warning: $.spec.managedBy: " in relaxed.stderr
    assert relaxed.stderr.rstrip().endswith("1 warning in 1 file")
    strict = run("render", "-", "--allow-empty", "--strict", stdin=MULTIKUEUE)
    assert strict.exit_code == 2
    assert ": warning: $.spec.managedBy: " in strict.stderr


def test_an_existing_empty_directory_may_be_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = run("render", "-", "-o", str(out), stdin=SAMPLE)
    assert result.exit_code == 0, result.stderr
    assert (out / ".kuberay-render").is_file()
    assert (out / "kustomization.yaml").is_file()


def test_check_names_missing_stale_and_differing_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run("render", "-", "-o", str(out), stdin=SAMPLE).exit_code == 0
    service = out / "service_default_raycluster-kuberay-head-svc.yaml"
    service.write_text(service.read_text() + "# edited\n")
    marker = out / ".kuberay-render"
    marker.write_text(marker.read_text() + "gone.yaml\n")
    (out / "gone.yaml").write_text("stale: true\n")
    pod = next(out.glob("pod_*head*.yaml"))
    pod.unlink()
    result = run("render", "-", "-o", str(out), "--check", stdin=SAMPLE)
    assert result.exit_code == 1
    assert f"{service}: differs" in result.stderr
    assert f"{out / 'gone.yaml'}: stale" in result.stderr
    assert f"{pod}: missing" in result.stderr
    assert "file(s) differ from a fresh render" in result.stderr


def test_plugins_that_fail_to_import_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    @click.command()
    def hello() -> None:
        click.echo("hi")

    class Entry:
        def __init__(self, name: str, target: Any) -> None:
            self.name, self._target = name, target

        def load(self) -> Any:
            if isinstance(self._target, Exception):
                raise self._target
            return self._target

    entries = [
        Entry("broken", ImportError("no module named ray_extra")),
        Entry("not-a-command", object()),
        Entry("hello", hello),
    ]
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: entries)
    monkeypatch.setattr(main, "commands", dict(main.commands))
    cli._load_plugins()
    assert "hello" in main.commands
    assert "broken" not in main.commands and "not-a-command" not in main.commands
    assert run("hello").stdout == "hi\n"
