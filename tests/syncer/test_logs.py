"""JSON-lines logging: the shape of each line, levels, context and lazy formatting."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from syncer.logs import JsonFormatter, set_level, setup_logging

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    libraries = {
        name: logging.getLogger(name).level for name in ("urllib3", "kubernetes", "watchfiles")
    }
    try:
        yield
    finally:
        for name, library_level in libraries.items():
            logging.getLogger(name).setLevel(library_level)
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_record_is_one_json_line_with_time_level_logger_message_and_context() -> None:
    stream = io.StringIO()
    setup_logging("info", stream=stream)
    logging.getLogger("syncer.rayjob.reconciler").info(
        "job %s moved to %s", "ml/train", "Running", extra={"namespace": "ml", "attempt": 2}
    )
    [entry] = lines(stream)
    assert list(entry)[:4] == ["time", "level", "logger", "message"]
    assert RFC3339_UTC.match(str(entry["time"]))
    assert entry == {
        "time": entry["time"],
        "level": "INFO",
        "logger": "syncer.rayjob.reconciler",
        "message": "job ml/train moved to Running",
        "attempt": 2,
        "namespace": "ml",
    }


def test_records_below_the_level_are_dropped_without_formatting_their_arguments() -> None:
    class Expensive:
        calls = 0

        def __str__(self) -> str:
            Expensive.calls += 1
            return "expensive"

    stream = io.StringIO()
    setup_logging("WARNING", stream=stream)
    log = logging.getLogger("syncer.test")
    log.info("value %s", Expensive())
    assert stream.getvalue() == ""
    assert Expensive.calls == 0
    log.warning("value %s", Expensive())
    assert [e["message"] for e in lines(stream)] == ["value expensive"]
    assert Expensive.calls == 1


def test_exceptions_and_unserialisable_context_are_kept_as_text() -> None:
    stream = io.StringIO()
    setup_logging("DEBUG", stream=stream)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("x").exception("failed", extra={"obj": object(), "time": "mine"})
    [entry] = lines(stream)
    assert entry["level"] == "ERROR"
    assert str(entry["exception"]).startswith("Traceback (most recent call last):")
    assert "ValueError: boom" in str(entry["exception"])
    assert str(entry["obj"]).startswith("<object object at")
    # A context key named like a fixed field does not overwrite it.
    assert entry["extra_time"] == "mine"
    assert RFC3339_UTC.match(str(entry["time"]))


def test_setting_up_twice_replaces_the_handler_and_set_level_changes_the_level() -> None:
    first, second = io.StringIO(), io.StringIO()
    setup_logging("INFO", stream=first)
    setup_logging("INFO", stream=second)
    log = logging.getLogger("y")
    log.info("once")
    assert first.getvalue() == ""
    assert [e["message"] for e in lines(second)] == ["once"]
    set_level("error")
    log.warning("dropped")
    assert len(lines(second)) == 1


def test_unknown_levels_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        setup_logging("loud", stream=io.StringIO())
    with pytest.raises(ValueError, match="unknown log level"):
        set_level("TRACE")


def test_the_formatter_uses_utc_whatever_the_record_time() -> None:
    record = logging.LogRecord("z", logging.INFO, __file__, 1, "at %d", (5,), None)
    record.created = 0.25
    entry = json.loads(JsonFormatter().format(record))
    assert entry["time"] == "1970-01-01T00:00:00.250Z"
    assert entry["message"] == "at 5"


def test_stack_info_is_kept() -> None:
    stream = io.StringIO()
    setup_logging("INFO", stream=stream)
    logging.getLogger("s").info("where", stack_info=True)
    [entry] = lines(stream)
    assert str(entry["stack"]).startswith("Stack (most recent call last):")
