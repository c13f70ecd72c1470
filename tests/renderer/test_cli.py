"""The `kuberay` command line: outputs, the output directory contract, exit codes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner, Result

from renderer import cli
from renderer import compile as compiler
from renderer.cli import main
from tests.paths import GOLDEN

SAMPLE = (GOLDEN / "raycluster-sample" / "input.yaml").read_text()
PASSTHROUGH = (GOLDEN / "raycluster-passthrough" / "input.yaml").read_text()


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin)


def test_render_writes_one_stream_to_stdout(tmp_path: Path) -> None:
    source = tmp_path / "c.yaml"
    source.write_text(SAMPLE)
    result = run("render", str(source))
    assert result.exit_code == 0, result.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout)]
    assert kinds == ["Service", "Pod", "Pod"]
    assert result.stdout.endswith("\n") and not result.stdout.endswith("\n\n")


def test_render_reads_stdin() -> None:
    result = run("render", "-", stdin=SAMPLE)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == run("render", str(GOLDEN / "raycluster-sample" / "input.yaml")).stdout


def test_directories_are_searched_recursively_for_yaml(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "c.yml").write_text(SAMPLE)
    (tmp_path / "a" / "notes.txt").write_text("not yaml: [")
    result = run("render", str(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert len(list(yaml.safe_load_all(result.stdout))) == 3


def test_output_is_identical_whatever_the_order_of_files_and_documents(tmp_path: Path) -> None:
    docs = [d for d in (SAMPLE + "\n---\n" + PASSTHROUGH).split("\n---\n") if d.strip()]
    outputs = set()
    rng = random.Random(7)
    for attempt in range(4):
        rng.shuffle(docs)
        folder = tmp_path / f"try{attempt}"
        folder.mkdir()
        for index, doc in enumerate(docs):
            (folder / f"{rng.random():.6f}-{index}.yaml").write_text(doc)
        result = run("render", str(folder))
        assert result.exit_code == 0, result.stderr
        outputs.add(result.stdout)
    assert len(outputs) == 1


def test_output_dir_writes_files_kustomization_and_marker(tmp_path: Path) -> None:
    out = tmp_path / "out"
    source = tmp_path / "c.yaml"
    source.write_text(SAMPLE)
    assert run("render", str(source), "-o", str(out)).exit_code == 0
    names = sorted(p.name for p in out.iterdir())
    assert ".kuberay-render" in names and "kustomization.yaml" in names
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(
        n for n in names if n not in (".kuberay-render", "kustomization.yaml")
    )
    assert "service_default_raycluster-kuberay-head-svc.yaml" in names


def test_output_dir_removes_only_its_own_stale_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    source = tmp_path / "c.yaml"
    source.write_text(SAMPLE)
    assert run("render", str(source), "-o", str(out)).exit_code == 0
    (out / "mine.txt").write_text("user file")
    before = {p.name for p in out.iterdir()}
    source.write_text(
        SAMPLE.replace("- replicas: 1\n    minReplicas: 1", "- replicas: 0\n    minReplicas: 0")
    )
    assert run("render", str(source), "-o", str(out)).exit_code == 0
    after = {p.name for p in out.iterdir()}
    removed = before - after
    assert len(removed) == 1 and next(iter(removed)).startswith(
        "pod_default_raycluster-kuberay-workergroup"
    )
    assert (out / "mine.txt").read_text() == "user file"


def test_output_dir_refuses_a_foreign_non_empty_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.yaml").write_text("x: 1\n")
    source = tmp_path / "c.yaml"
    source.write_text(SAMPLE)
    result = run("render", str(source), "-o", str(out))
    assert result.exit_code == 2
    assert "was not written by kuberay render" in result.stderr
    assert [p.name for p in out.iterdir()] == ["keep.yaml"]


def test_check_and_diff(tmp_path: Path) -> None:
    out = tmp_path / "out"
    source = tmp_path / "c.yaml"
    source.write_text(SAMPLE)
    assert run("render", str(source), "-o", str(out), "--check").exit_code == 1
    assert not out.exists()
    assert run("render", str(source), "-o", str(out)).exit_code == 0
    assert run("render", str(source), "-o", str(out), "--check").exit_code == 0
    source.write_text(SAMPLE.replace("rayproject/ray:2.52.0", "rayproject/ray:2.52.1"))
    check = run("render", str(source), "-o", str(out), "--check")
    assert check.exit_code == 1
    assert "differ from a fresh render" in check.stderr
    diff = run("render", str(source), "-o", str(out), "--diff")
    assert diff.exit_code == 1
    assert "+    image: rayproject/ray:2.52.1" in diff.stdout
    assert "-    image: rayproject/ray:2.52.0" in diff.stdout


def test_check_without_output_dir_is_a_usage_error(tmp_path: Path) -> None:
    source = tmp_path / "c.yaml"
    source.write_text(SAMPLE)
    result = run("render", str(source), "--check")
    assert result.exit_code == 2
    assert "--output-dir" in result.stderr


def test_invalid_input_writes_nothing_and_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    good = tmp_path / "a.yaml"
    good.write_text(SAMPLE)
    bad = tmp_path / "b.yaml"
    bad.write_text(
        SAMPLE.replace("replicas: 1", 'replicas: "two"').replace("raycluster-kuberay", "other")
    )
    result = run("render", str(tmp_path), "-o", str(out))
    assert result.exit_code == 2
    assert f"{bad}:" in result.stderr
    assert "$.spec.workerGroupSpecs[0].replicas" in result.stderr
    assert result.stderr.rstrip().endswith("nothing written")
    assert not out.exists()
    assert "Traceback" not in result.stderr


def test_empty_input_is_an_error_unless_allowed(tmp_path: Path) -> None:
    source = tmp_path / "empty.yaml"
    source.write_text("---\n")
    assert run("render", str(source)).exit_code == 2
    allowed = run("render", str(source), "--allow-empty")
    assert allowed.exit_code == 0 and allowed.stdout == ""


def test_missing_file_is_reported(tmp_path: Path) -> None:
    result = run("render", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "no such file or directory" in result.stderr


def test_unknown_feature_gate_is_a_usage_error(tmp_path: Path) -> None:
    result = run("render", "-", "--feature-gates", "NoSuchGate=true", stdin=SAMPLE)
    assert result.exit_code == 2
    assert "unknown feature gate" in result.stderr


def test_feature_gate_enables_a_field(tmp_path: Path) -> None:
    policy = SAMPLE.replace(
        "spec:\n  rayVersion", "spec:\n  networkPolicy: {mode: DenyAllIngress}\n  rayVersion", 1
    )
    refused = run("render", "-", stdin=policy)
    assert refused.exit_code == 2
    assert "RayClusterNetworkPolicy" in refused.stderr
    allowed = run("render", "-", "--feature-gates", "RayClusterNetworkPolicy=true", stdin=policy)
    assert allowed.exit_code == 0, allowed.stderr
    assert "kind: NetworkPolicy" in allowed.stdout


def test_an_object_rendered_twice_is_an_error(tmp_path: Path) -> None:
    result = run("render", "-", stdin=SAMPLE + "\n---\n" + SAMPLE)
    assert result.exit_code == 2
    assert "is produced twice" in result.stderr


def test_internal_errors_exit_3_with_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("boom")

    monkeypatch.setattr(compiler, "render", broken)
    result = run("render", "-", stdin=SAMPLE)
    assert result.exit_code == 3
    assert "Traceback" in result.stderr and "RuntimeError: boom" in result.stderr


def test_validate_writes_nothing(tmp_path: Path) -> None:
    result = run("validate", "-", stdin=SAMPLE)
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "ok: 3 objects" in result.stderr


def test_gitops_config_prints_the_fragment_for_the_rendered_routes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = str(GOLDEN / "rayservice-incremental" / "input.yaml")
    argocd = run("render", source, "--gitops-config", "argocd")
    assert argocd.exit_code == 0, argocd.stderr
    application, health_patch = yaml.safe_load_all(argocd.stdout)
    assert application["kind"] == "Application"
    assert health_patch["metadata"]["name"] == "argocd-cm"
    assert "RespectIgnoreDifferences=true" in application["spec"]["syncPolicy"]["syncOptions"]
    assert all(
        d["jsonPointers"] == ["/spec/rules"] for d in application["spec"]["ignoreDifferences"]
    )
    flux = run("render", source, "--gitops-config", "flux")
    assert flux.exit_code == 0, flux.stderr
    kustomization = yaml.safe_load(flux.stdout)
    assert kustomization["kind"] == "Kustomization"
    assert kustomization["spec"]["ignore"][0]["paths"] == ["/spec/rules"]
    refused = run("render", source, "--gitops-config", "flux", "-o", "somewhere")
    assert refused.exit_code == 2


MULTIKUEUE = SAMPLE.replace("spec:\n", "spec:\n  managedBy: kueue.x-k8s.io/multikueue\n", 1)


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
