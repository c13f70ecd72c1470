"""JSON-lines logging for the syncer: one object per record, on stderr by default.

Each line holds `time` (UTC, RFC 3339 with milliseconds), `level`, `logger`, `message`
(the `%s` arguments applied only when the record is written), any `extra={...}` context,
and `exception` when there is one. Only `setup_logging` touches the root logger.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Final, TextIO

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD: Final = frozenset(
    {*vars(logging.LogRecord("", 0, "", 0, "", None, None)), "message", "asctime", "taskName"}
)
_RESERVED: Final = frozenset({"time", "level", "logger", "message", "exception", "stack"})
LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON (keys of `extra` after the fixed ones)."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as a JSON object on one line."""
        moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        entry: dict[str, object] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in sorted(vars(record).items()):
            if key not in _STANDARD and not key.startswith("_"):
                # A context key that collides with a fixed one keeps its value, renamed.
                entry[f"extra_{key}" if key in _RESERVED else key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def _level(level: str) -> int:
    name = level.upper()
    if name not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(LEVELS)}")
    return int(getattr(logging, name))


def setup_logging(level: str, *, stream: TextIO | None = None) -> logging.Handler:
    """Send every log record at `level` or above to `stream` (stderr) as JSON lines.

    Replaces the handlers of the root logger, so calling it again re-targets rather
    than duplicates. Returns the handler it installed.

    Raises:
        ValueError: `level` is not one of `LEVELS` (in any case).
    """
    number = _level(level)
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)
    # Library chatter (the kubernetes client logs every request at DEBUG) stays at WARNING.
    for noisy in ("urllib3", "kubernetes", "watchfiles"):
        logging.getLogger(noisy).setLevel(max(number, logging.WARNING))
    return handler


def set_level(level: str) -> None:
    """Change the root logger's level, e.g. after a config reload."""
    logging.getLogger().setLevel(_level(level))
