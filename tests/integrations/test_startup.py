"""`kuberay render` loads only what rendering needs: no syncer, no `kubernetes` package.

Plugin commands (`kuberay status`, `kuberay gc`) come from entry points and load only when
invoked or listed. Timing is a benchmark (`./run bench startup`), not a test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.paths import EXAMPLES

PROBE = """
import json, sys
from renderer.launch import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = ("kubernetes", "syncer", "watchfiles", "jinja2")
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(heavy))
print(json.dumps(loaded), file=sys.stderr)
"""
# Loaded only for their kind or option: another kind's pipeline, the batch schedulers, the
# GitOps configs, the output directory and its diff, the suggestion of a misspelt field;
# click, for a command line the fast start (renderer.launch) parses.
LAZY = (
    "renderer.kinds.rayjob",
    "renderer.kinds.rayservice",
    "renderer.model.rayjob",
    "renderer.objects.batchscheduling",
    "renderer.gitops",
    "renderer.outdir",
    "renderer.ghformat",
    "difflib",
    "traceback",
    "importlib.resources",
    "click",
)


def loaded_after(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=False
    )
    last = done.stderr.strip().splitlines()[-1]
    return list(json.loads(last))


def test_render_imports_neither_the_syncer_nor_kubernetes() -> None:
    assert loaded_after("render", str(EXAMPLES / "raycluster.yaml")) == []
    # A RayJob's submitter script is a jinja2 template: only then is jinja2 loaded.
    assert loaded_after("validate", str(EXAMPLES / "rayjob.yaml")) in ([], ["jinja2"])
    assert "jinja2" in loaded_after("render", str(EXAMPLES / "rayjob.yaml"))


def modules_after(lazy: tuple[str, ...], *argv: str) -> list[str]:
    """Which of `lazy` a `kuberay` run in a fresh interpreter imported."""
    probe = PROBE.replace(
        'heavy = ("kubernetes", "syncer", "watchfiles", "jinja2")', f"heavy = {lazy!r}"
    )
    probe = probe.replace('{m.split(".")[0] for m in sys.modules}', "set(sys.modules)")
    done = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=False
    )
    return list(json.loads(done.stderr.strip().splitlines()[-1]))


def test_a_raycluster_render_loads_no_other_kind_and_no_optional_module() -> None:
    # Nor hashlib (naming uses CPython's builtin SHA-256: the same digest without OpenSSL;
    # a RayJob's jinja2 loads hashlib for itself).
    assert modules_after((*LAZY, "hashlib"), "render", str(EXAMPLES / "raycluster.yaml")) == []
    # Each loads when its kind or option is there (so the probe can see them at all).
    assert modules_after(LAZY, "render", str(EXAMPLES / "rayjob.yaml")) == [
        "renderer.kinds.rayjob",
        "renderer.model.rayjob",
    ]
    scheduled = modules_after(
        LAZY, "render", str(EXAMPLES / "raycluster.yaml"), "--batch-scheduler", "volcano"
    )
    # (the batch schedulers' module reads the RayJob model's constants)
    assert scheduled == ["renderer.model.rayjob", "renderer.objects.batchscheduling"]
    flux = modules_after(
        LAZY, "render", str(EXAMPLES / "raycluster.yaml"), "--gitops-config", "flux"
    )
    assert flux == ["renderer.gitops"]


def test_plugin_commands_still_load_when_invoked_or_listed() -> None:
    assert "syncer" in loaded_after("status", "--help")
    assert not [m for m in loaded_after("render", str(EXAMPLES / "rayjob.yaml")) if m != "jinja2"]
    assert "syncer" in loaded_after("--help")
    listing = subprocess.run(
        [str(Path(sys.executable).with_name("kuberay")), "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "status" in listing and "gc" in listing and "render" in listing


def test_an_unknown_command_is_a_usage_error() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).with_name("kuberay")), "no-such-command"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "No such command" in done.stderr
