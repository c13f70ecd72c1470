"""Reloads the syncer's config file when it changes; the last good config stays in force.

`ConfigWatcher` watches the file's directory with `watchfiles` in a daemon thread (a
Kubernetes ConfigMap volume replaces files by swapping a `..data` symlink, which a watch
on the file alone would miss) and compares the file's text, so only real edits count.
A bad edit is logged in the compiler style of `syncer.config` and changes nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import watchfiles

from syncer import metrics
from syncer.config import (
    UNUSED_FIELDS,
    Config,
    changed,
    format_config_errors,
    parse_config,
    restart_required,
)

_LOG = logging.getLogger(__name__)


class ConfigWatcher:
    """Calls `on_change(new_config)` after each valid edit of the file at `path`.

    Start it with `start()` (or `with ConfigWatcher(...)`) and end it with `stop()`.
    `check()` re-reads the file at once (for SIGHUP, or tests). Between events the file
    is also re-read every `timeout_ms`, so an event lost by the OS delays a reload but
    never loses it.
    """

    def __init__(
        self,
        path: str | Path,
        initial: Config,
        on_change: Callable[[Config], None],
        *,
        logger: logging.Logger | None = None,
        force_polling: bool | None = None,
        debounce_ms: int = 500,
        poll_delay_ms: int = 300,
        timeout_ms: int = 1_000,
    ) -> None:
        self._path = Path(path)
        self._current = initial
        self._on_change = on_change
        self._log = logger or _LOG
        self._force_polling = force_polling
        self._debounce_ms = debounce_ms
        self._poll_delay_ms = poll_delay_ms
        self._timeout_ms = timeout_ms
        self._timeout_s = timeout_ms / 1000
        # Serialises `check()` (the watcher thread and, say, a SIGHUP handler), so callbacks
        # see configs in the order they were applied.
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watching = threading.Event()
        self._thread: threading.Thread | None = None
        # The text the current config came from (or was rejected for): edits are compared
        # against it, so touching the file or rewriting the same bytes does nothing.
        self._seen_text = self._read()

    @property
    def current(self) -> Config:
        """The config in force: the last one that parsed, else `initial`."""
        return self._current

    def start(self) -> ConfigWatcher:
        """Start watching in a daemon thread; returns self."""
        if self._thread is not None:
            raise RuntimeError("the config watcher is already started")
        self._thread = threading.Thread(target=self._run, name="config-watcher", daemon=True)
        self._thread.start()
        return self

    def wait_watching(self, timeout: float) -> bool:
        """Wait until the file system watch is in place; whether it is."""
        return self._watching.wait(timeout)

    def stop(self) -> None:
        """Stop watching and wait for the thread to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._timeout_s + 5.0)

    def __enter__(self) -> ConfigWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _read(self) -> str | None:
        try:
            return self._path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for _changes in watchfiles.watch(
                    self._path.parent,
                    watch_filter=None,
                    stop_event=self._stop,
                    yield_on_timeout=True,
                    raise_interrupt=False,
                    force_polling=self._force_polling,
                    debounce=self._debounce_ms,
                    poll_delay_ms=self._poll_delay_ms,
                    rust_timeout=self._timeout_ms,
                ):
                    self._watching.set()
                    self.check()
            except Exception:  # noqa: BLE001 - keep watching whatever the file system does
                self._log.exception("watching the config file failed; retrying")
                self._watching.clear()
                self._stop.wait(self._timeout_s)

    def check(self) -> bool:
        """Re-read the file now; whether a new config was applied."""
        with self._lock:
            return self._check()

    def _check(self) -> bool:
        text = self._read()
        if text is None or text == self._seen_text:
            # A missing file is often a moment inside an atomic replace: wait for the next
            # event rather than report it.
            return False
        self._seen_text = text
        old = self._current
        new, diagnostics = parse_config(text, str(self._path))
        if new is None:
            metrics.CONFIG_RELOADS.labels(result="rejected").inc()
            self._log.error(
                "the changed config is invalid; the previous config stays in force:\n%s",
                format_config_errors(diagnostics),
                extra={"path": str(self._path)},
            )
            return False
        metrics.CONFIG_RELOADS.labels(result="applied").inc()
        if new == old:
            return False
        self._current = new
        pending = restart_required(old, new)
        if pending:
            self._log.warning(
                "config changed; %s take effect at the next restart",
                ", ".join(pending),
                extra={"path": str(self._path)},
            )
        unused = changed(old, new, UNUSED_FIELDS)
        if unused:
            self._log.warning(
                "config changed; %s has no effect in this version",
                ", ".join(unused),
                extra={"path": str(self._path)},
            )
        self._log.info("config reloaded", extra={"path": str(self._path)})
        try:
            self._on_change(new)
        except Exception:  # noqa: BLE001 - a failing callback must not stop the watcher
            self._log.exception("applying the reloaded config failed")
        return True
