"""Shared test options and fixtures.

`--update-golden` rewrites expected golden files. The fake Kubernetes API fixtures
(`kube_api`, `fake_api_server`, `fake_controllers`) are available everywhere.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

pytest_plugins = ["tests.fakeapi.fixtures", "tests.e2e.fixtures"]


# CI runs the property tests on a fixed set of examples, so a red build is reproducible;
# locally each run explores new ones.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/*/expected.yaml and tests/invalid/*.txt from the current code",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))
