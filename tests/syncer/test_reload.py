"""Config reload with a real file and a real watchfiles watch (polling, short debounce).

Every wait is bounded (5 s) and ends on an event, never on a sleep.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncer import metrics
from syncer.config import Config, load_config
from syncer.reload import ConfigWatcher

WAIT_S = 5.0


class Records(logging.Handler):
    """Collects records of one logger and signals each one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: queue.Queue[logging.LogRecord] = queue.Queue()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.put(record)

    def next_at(self, level: int) -> logging.LogRecord:
        while True:
            record = self.records.get(timeout=WAIT_S)
            if record.levelno >= level:
                return record


@pytest.fixture
def logger(request: pytest.FixtureRequest) -> Iterator[tuple[logging.Logger, Records]]:
    log = logging.getLogger(f"tests.reload.{request.node.name}")
    log.setLevel(logging.DEBUG)
    handler = Records()
    log.addHandler(handler)
    try:
        yield log, handler
    finally:
        log.removeHandler(handler)


def replace(path: Path, text: str) -> None:
    """Write the way editors and the kubelet do: a new file renamed over the old one."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text, encoding="utf-8")
    temp.replace(path)


class Changes:
    def __init__(self) -> None:
        self.configs: queue.Queue[Config] = queue.Queue()

    def __call__(self, config: Config) -> None:
        self.configs.put(config)

    def next(self) -> Config:
        return self.configs.get(timeout=WAIT_S)


def start(
    path: Path, changes: Changes, log: logging.Logger, *, force_polling: bool | None = True
) -> ConfigWatcher:
    watcher = ConfigWatcher(
        path,
        load_config(path),
        changes,
        logger=log,
        force_polling=force_polling,
        debounce_ms=50,
        poll_delay_ms=50,
        timeout_ms=200,
    ).start()
    assert watcher.wait_watching(WAIT_S)
    return watcher


def test_valid_edit_applies_invalid_edit_is_reported_and_ignored_then_valid_applies(
    tmp_path: Path, logger: tuple[logging.Logger, Records]
) -> None:
    log, records = logger
    path = tmp_path / "config.yaml"
    path.write_text("poll_interval_s: 3\n", encoding="utf-8")
    changes = Changes()
    rejected = metrics.CONFIG_RELOADS.labels(result="rejected")
    rejected_before = rejected.value
    watcher = start(path, changes, log)
    try:
        replace(path, "poll_interval_s: 5\n")
        assert changes.next().poll_interval_s == 5.0
        assert watcher.current.poll_interval_s == 5.0

        replace(path, "poll_interval_s: 7\nttl_mode: nuke\n")
        error = records.next_at(logging.ERROR)
        message = error.getMessage()
        assert message.startswith("the changed config is invalid; the previous config stays")
        assert f'{path}:2:11: error: $.ttl_mode: expected "stop" or "delete", got "nuke"' in message
        assert message.endswith("1 error in the syncer config")
        assert watcher.current.poll_interval_s == 5.0
        assert changes.configs.empty()
        assert rejected.value == rejected_before + 1

        replace(path, "poll_interval_s: 9\n")
        assert changes.next().poll_interval_s == 9.0
        assert watcher.current.poll_interval_s == 9.0
    finally:
        watcher.stop()


@pytest.mark.parametrize("force_polling", [True, None], ids=["polling", "native"])
def test_kubelet_symlink_swap_is_seen(
    tmp_path: Path, logger: tuple[logging.Logger, Records], force_polling: bool | None
) -> None:
    # A ConfigMap volume: config.yaml -> ..data/config.yaml, ..data -> ..<timestamp>/
    log, _ = logger
    first = tmp_path / "..2024_01_01"
    first.mkdir()
    (first / "config.yaml").write_text("ttl_mode: stop\n", encoding="utf-8")
    (tmp_path / "..data").symlink_to(first.name)
    path = tmp_path / "config.yaml"
    path.symlink_to("..data/config.yaml")
    changes = Changes()
    watcher = start(path, changes, log, force_polling=force_polling)
    try:
        second = tmp_path / "..2024_01_02"
        second.mkdir()
        (second / "config.yaml").write_text("ttl_mode: delete\n", encoding="utf-8")
        (tmp_path / "..data_tmp").symlink_to(second.name)
        (tmp_path / "..data_tmp").replace(tmp_path / "..data")
        assert changes.next().ttl_mode == "delete"
    finally:
        watcher.stop()


def test_check_applies_only_real_changes(
    tmp_path: Path, logger: tuple[logging.Logger, Records]
) -> None:
    log, records = logger
    path = tmp_path / "config.yaml"
    path.write_text("ttl_mode: stop\n", encoding="utf-8")
    changes = Changes()
    watcher = ConfigWatcher(path, load_config(path), changes, logger=log)
    assert watcher.check() is False  # same text
    path.write_text("# a comment only\nttl_mode: stop\n", encoding="utf-8")
    assert watcher.check() is False  # same config
    path.write_text("ttl_mode: stop\nmetrics_port: 9090\n", encoding="utf-8")
    assert watcher.check() is True
    assert changes.next().metrics_port == 9090
    warning = records.next_at(logging.WARNING)
    assert warning.getMessage() == "config changed; metrics_port take effect at the next restart"
    path.unlink()
    assert watcher.check() is False  # a missing file is a moment in a replace
    assert watcher.current.metrics_port == 9090


def test_a_failing_callback_keeps_the_new_config_and_the_watcher_alive(
    tmp_path: Path, logger: tuple[logging.Logger, Records]
) -> None:
    log, records = logger
    path = tmp_path / "config.yaml"
    path.write_text("", encoding="utf-8")
    calls: list[Config] = []

    def explode(config: Config) -> None:
        calls.append(config)
        raise RuntimeError("cannot apply")

    watcher = ConfigWatcher(path, Config(), explode, logger=log)
    path.write_text("poll_interval_s: 1\n", encoding="utf-8")
    assert watcher.check() is True
    assert records.next_at(logging.ERROR).getMessage() == "applying the reloaded config failed"
    assert watcher.current.poll_interval_s == 1.0
    assert len(calls) == 1


def test_stop_ends_the_thread_promptly(
    tmp_path: Path, logger: tuple[logging.Logger, Records]
) -> None:
    log, _ = logger
    path = tmp_path / "config.yaml"
    path.write_text("", encoding="utf-8")
    watcher = ConfigWatcher(path, Config(), Changes(), logger=log, timeout_ms=200)
    with watcher:
        assert watcher.wait_watching(WAIT_S)
        threads = [t for t in threading.enumerate() if t.name == "config-watcher"]
        assert threads
    assert not any(t.is_alive() for t in threads)
    with pytest.raises(RuntimeError, match="already started"):
        watcher.start()


def test_a_missing_directory_is_retried_until_it_appears(
    tmp_path: Path, logger: tuple[logging.Logger, Records]
) -> None:
    log, records = logger
    path = tmp_path / "later" / "config.yaml"
    changes = Changes()
    watcher = ConfigWatcher(path, Config(), changes, logger=log, force_polling=True, timeout_ms=200)
    with watcher:
        failure = records.next_at(logging.ERROR)
        assert failure.getMessage() == "watching the config file failed; retrying"
        path.parent.mkdir()
        path.write_text("ttl_mode: delete\n", encoding="utf-8")
        assert changes.next().ttl_mode == "delete"
