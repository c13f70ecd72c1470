"""The real Ray head fixture (a pytest plugin, loaded by tests/conftest.py): one loopback-only
Ray head per test session, shared by tests/e2e and the syncer fault tests."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.e2e.rayhead import RayHead, RayHeadError

_TIMINGS = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_TIMINGS] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses the Ray head as e2e, so `-m "not e2e"` leaves it out."""
    for item in items:
        if "ray_head" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def ray_head(pytestconfig: pytest.Config) -> Iterator[RayHead]:
    """A Ray head on 127.0.0.1 with 2 logical CPUs, shared by the whole session.

    It fails the requesting test (it does not skip) when Ray cannot start.
    """
    head = RayHead()
    try:
        head.start()
    except RayHeadError as exc:
        pytest.fail(f"could not start the Ray head for e2e tests: {exc}", pytrace=False)
    timings = pytestconfig.stash[_TIMINGS]
    timings.append(
        f"ray head {head.dashboard_url}: started in {head.startup_s:.1f} s "
        f"(attempts: {head.attempts})"
    )
    yield head
    began = time.monotonic()
    leftovers = head.stop()
    timings.append(
        f"ray head stopped in {time.monotonic() - began:.1f} s "
        f"({len(leftovers)} leftover processes killed)"
    )


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    for line in config.stash.get(_TIMINGS, []):
        terminalreporter.write_line(line)
