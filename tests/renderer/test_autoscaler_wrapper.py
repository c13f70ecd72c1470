"""The autoscaler sidecar's wrapper (renderer/assets/autoscaler/wrapper.py).

It runs in the Ray image (Python >= 3.9, stdlib and Ray only). The loops are driven with real
subprocesses (a stand-in `ray` on PATH, a stand-in monitor module); the Ray reads (log
directory, autoscaler version, node IP) run against the session's real Ray head.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from renderer.assets.autoscaler import wrapper
from renderer.model.raycluster import parse_raycluster
from renderer.objects import autoscaling
from tests.e2e.rayhead import RayHead

WRAPPER = Path(wrapper.__file__)


def test_the_wrapper_is_python_3_9_and_imports_only_the_stdlib_and_ray() -> None:
    tree = ast.parse(WRAPPER.read_text(encoding="utf-8"), feature_version=(3, 9))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - {"ray", "__future__"} <= set(sys.stdlib_module_names)
    assert "ray" in imported


def test_the_rendered_command_is_what_the_wrapper_parses() -> None:
    head = {"rayStartParams": {"port": "6380"}, "template": {"spec": {"containers": [{}]}}}
    cluster = parse_raycluster("c", "ns", {"headGroupSpec": head})
    python, script, *flags = shlex.split(autoscaling.wrapper_command(cluster))
    assert (python, script) == ("python", "/etc/kuberay-gitops/wrapper.py")
    args = wrapper.parse_args(flags)
    assert (args.gcs_port, args.autoscaling_config) == (
        "6380",
        "/etc/kuberay-gitops/autoscaling.yaml",
    )
    assert wrapper.parse_args([]).autoscaling_config == str(WRAPPER.parent / "autoscaling.yaml")


def test_addresses_bracket_ipv6_hosts() -> None:
    assert wrapper.join_address("10.0.0.7", "6379") == "10.0.0.7:6379"
    assert wrapper.join_address("fd00::7", "6379") == "[fd00::7]:6379"


def _fake_ray(tmp_path: Path, failures: int) -> Path:
    """A `ray` on PATH whose `health-check` fails `failures` times, then answers."""
    counter = tmp_path / "calls"
    script = tmp_path / "bin" / "ray"
    script.parent.mkdir()
    script.write_text(
        f'#!/bin/sh\necho "$@" >> {counter}\n[ "$(wc -l < {counter})" -gt {failures} ]\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    return counter


def test_wait_for_head_loops_on_ray_health_check_until_the_head_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    counter = _fake_ray(tmp_path, failures=2)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    sleeps: list[float] = []
    wrapper.wait_for_head("10.0.0.7:6379", backoff=5, sleep=sleeps.append)
    assert sleeps == [5, 5]
    calls = counter.read_text().splitlines()
    assert calls == ["health-check --address 10.0.0.7:6379 --skip-version-check"] * 3
    assert "is ready" in capsys.readouterr().out


def test_the_monitor_runs_with_the_config_and_the_provider_on_pythonpath() -> None:
    command = wrapper.monitor_command(
        wrapper.MONITOR_MODULE,
        address="10.0.0.7:6379",
        config="/etc/kuberay-gitops/autoscaling.yaml",
        logs_dir="/tmp/ray/session_latest/logs",
        monitor_ip="10.0.0.7",
    )
    assert command == [
        sys.executable,
        "-m",
        "ray.autoscaler.v2.monitor",
        "--gcs-address=10.0.0.7:6379",
        "--autoscaling-config=/etc/kuberay-gitops/autoscaling.yaml",
        "--logs-dir=/tmp/ray/session_latest/logs",
        "--monitor-ip=10.0.0.7",
    ]
    here = wrapper.HERE
    assert wrapper.monitor_env({"PYTHONPATH": "/a"})["PYTHONPATH"] == f"{here}{os.pathsep}/a"
    assert wrapper.monitor_env({"PYTHONPATH": here})["PYTHONPATH"] == here
    assert wrapper.monitor_env({})["PYTHONPATH"] == here
    assert "PATH" in wrapper.monitor_env()


def test_keep_running_restarts_an_exiting_monitor(capsys: pytest.CaptureFixture[str]) -> None:
    restarts: list[int] = []
    sleeps: list[float] = []
    code = wrapper.keep_running(
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        dict(os.environ),
        backoff=2,
        max_starts=3,
        before_restart=lambda: restarts.append(1),
        sleep=sleeps.append,
    )
    assert (code, len(restarts), sleeps) == (3, 2, [2, 2, 2])
    assert capsys.readouterr().out.count("exited with code 3") == 3


def test_a_signal_during_a_run_stops_the_restarts() -> None:
    # The monitor stands in for the kubelet: it sends SIGTERM to the wrapper, then exits.
    code = wrapper.keep_running(
        [sys.executable, "-c", "import os, signal; os.kill(os.getppid(), signal.SIGTERM)"],
        dict(os.environ),
        backoff=0,
        sleep=lambda _: pytest.fail("no restart after a signal"),
    )
    assert code in (0, -signal.SIGTERM)  # it may get the forwarded signal before it exits


def test_a_signal_stops_the_monitor_and_the_wrapper() -> None:
    monitor = wrapper._Monitor()
    monitor.forward(signal.SIGTERM, None)  # nothing running yet: only remembered
    assert monitor.stopped()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        monitor.child = child
        monitor.forward(signal.SIGTERM, None)
        assert child.wait(timeout=30) == -signal.SIGTERM
        monitor.forward(signal.SIGTERM, None)  # an ended child is left alone
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_main_runs_the_monitor_after_the_head_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_ray(tmp_path, failures=0)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "standin_monitor.py").write_text(
        "import sys\n"
        "logs = next(a for a in sys.argv if a.startswith('--logs-dir=')).split('=', 1)[1]\n"
        "open(logs + '/ran', 'w').write(' '.join(sys.argv[1:]))\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    before = signal.getsignal(signal.SIGTERM)
    code = wrapper.main(
        [
            "--gcs-address=127.0.0.1:1",
            "--monitor-ip=127.0.0.1",
            f"--logs-dir={tmp_path}",
            "--monitor-module=standin_monitor",
            "--max-starts=1",
            "--skip-v2-check",
        ]
    )
    assert code == 0
    assert (tmp_path / "ran").read_text() == (
        f"--gcs-address=127.0.0.1:1 --autoscaling-config={wrapper.HERE}/autoscaling.yaml "
        f"--logs-dir={tmp_path} --monitor-ip=127.0.0.1"
    )
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers are given back


def test_the_wrapper_process_forwards_sigterm_to_the_monitor(tmp_path: Path) -> None:
    _fake_ray(tmp_path, failures=0)
    (tmp_path / "standin_monitor.py").write_text(
        "import time\nprint('monitor up', flush=True)\ntime.sleep(60)\n", encoding="utf-8"
    )
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(tmp_path),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            str(WRAPPER),
            "--gcs-address=127.0.0.1:1",
            "--monitor-ip=127.0.0.1",
            f"--logs-dir={tmp_path}",
            "--monitor-module=standin_monitor",
            "--skip-v2-check",
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "monitor up" in line:
                break
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 128 + signal.SIGTERM  # the monitor's, forwarded
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_the_ray_reads_against_a_real_head(ray_head: RayHead) -> None:
    # In a child process: Ray's GCS client can end the process it runs in, and the Ray image
    # runs these reads as a process of its own too.
    script = (
        "import json, sys\n"
        "from renderer.assets.autoscaler import wrapper\n"
        "address = sys.argv[1]\n"
        "print(json.dumps([wrapper.node_ip(), wrapper.head_log_dir(address),\n"
        "                  wrapper.uses_autoscaler_v2(address)]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, ray_head.gcs_address],
        env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},  # the head is loopback
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    ip, logs, v2 = json.loads(result.stdout.splitlines()[-1])
    assert ip
    assert logs.endswith("/logs") and Path(logs).is_dir()
    assert isinstance(v2, bool)


def test_main_refuses_a_head_on_autoscaler_v1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_ray(tmp_path, failures=0)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(wrapper, "uses_autoscaler_v2", lambda address: False)
    assert wrapper.main(["--gcs-address=127.0.0.1:1", "--monitor-ip=127.0.0.1"]) == 2
    assert "autoscaler v1" in capsys.readouterr().out


def test_exit_status_follows_the_shell() -> None:
    assert [wrapper.exit_status(c) for c in (0, 3, -15)] == [0, 3, 143]


def test_head_log_dir_falls_back_without_rays_gcs_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray.autoscaler._private.kuberay.run_autoscaler", None)
    assert wrapper.head_log_dir("127.0.0.1:1") == wrapper.DEFAULT_LOG_DIR
