"""The daemon caps glibc's malloc arenas before its threads start, unless told otherwise."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CODE = "from syncer.memory import limit_malloc_arenas; print(limit_malloc_arenas())"


def _run(env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", CODE], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_arenas_are_capped_unless_the_environment_sets_them() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert _run(env) == "True"  # glibc accepted M_ARENA_MAX
    assert _run({**env, "MALLOC_ARENA_MAX": "4"}) == "False"  # the operator's setting stands


def test_the_daemon_caps_them_before_it_reads_its_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from syncer import cli, memory

    calls: list[str] = []
    monkeypatch.setattr(memory, "limit_malloc_arenas", lambda: calls.append("arenas"))

    def stop_here(*args: object) -> None:
        calls.append("config")
        raise SystemExit(0)

    monkeypatch.setattr(cli, "_load", stop_here)
    with pytest.raises(SystemExit):
        cli.serve(None, None, None, None, True)
    assert calls == ["arenas", "config"]
