"""The fake API server's own tests, run once more against the real control plane.

`tests.fakeapi.fixtures.kube_api` talks to the cluster that `KUBECONFIG` names instead of
starting the fake, and a test that needs the fake itself (fault injection, direct store
access) skips there. This runs the chosen suites in a pytest subprocess with `KUBECONFIG`
at the session's admin kubeconfig (the Gateway API CRDs installed, the test node
cordoned) and requires every one of their tests to pass or skip: a failure is a place
where the fake and the real server disagree, or where a test leans on a simplification
of the fake.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Final

import pytest

from tests.realapi.controlplane import ControlPlane
from tests.realapi.kubelet import TestKubelet
from tests.realapi.rest import Rest

REPO: Final = Path(__file__).resolve().parents[2]
SUITES: Final = (
    "tests/fakeapi/test_server.py",
    "tests/syncer/test_statuscmd.py",
    "tests/syncer/test_gitops_sim.py",
)
# What passed on the real server when this was written (the rest skip: they need the fake).
MIN_PASSED: Final = 43


@pytest.mark.timeout(900)
def test_the_fake_api_suites_pass_against_the_real_server(
    control_plane: ControlPlane, test_kubelet: TestKubelet, crds: list[str], tmp_path: Path
) -> None:
    report = tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["KUBECONFIG"] = str(control_plane.admin_kubeconfig)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += ["--junitxml", str(report), *SUITES]
    # Cordoned, so the pods those tests make stay Pending (they expect no kubelet).
    node = f"/api/v1/nodes/{test_kubelet.node}"
    rest = Rest(control_plane.server, control_plane.admin_token, ca=control_plane.ca)
    rest.patch(node, {"spec": {"unschedulable": True}})
    try:
        done = subprocess.run(
            argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=840, check=False
        )
    finally:
        rest.patch(node, {"spec": {"unschedulable": None}})
    assert report.exists(), done.stdout[-4000:] + done.stderr[-2000:]
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    summary = f"{counts}; passed {passed}\n{done.stdout[-6000:]}"
    assert counts["failures"] == counts["errors"] == 0, summary
    assert passed >= MIN_PASSED, summary
