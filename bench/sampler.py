"""A sampling profiler for every thread of this process (no py-spy on this machine).

`Sampler` wakes every `interval_s`, reads `sys._current_frames()` and counts, per thread
role, the innermost frame (self time) and every function on the stack (inclusive time).
It sees what holds the GIL or waits in C, which cProfile, one thread at a time, does not.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType

_IDLE = ("wait", "select", "poll", "sleep", "_wait_for_tstate_lock", "accept", "readinto")


def _where(frame: FrameType) -> str:
    code = frame.f_code
    path = Path(code.co_filename)
    short = "/".join(path.parts[-2:])
    return f"{short}:{code.co_firstlineno}:{code.co_name}"


class Sampler:
    """Counts stack samples of all threads but its own until `stop`."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self._interval = interval_s
        self._stop = threading.Event()
        self.self_time: Counter[str] = Counter()
        self.inclusive: Counter[str] = Counter()
        self.samples = 0
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self._interval):
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                leaf = _where(frame)
                if frame.f_code.co_name in _IDLE:
                    continue  # a thread asleep or blocked costs nothing
                self.samples += 1
                self.self_time[leaf] += 1
                seen: set[str] = set()
                current: FrameType | None = frame
                while current is not None:
                    where = _where(current)
                    if where not in seen:
                        seen.add(where)
                        self.inclusive[where] += 1
                    current = current.f_back

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def report(self, top: int = 40) -> str:
        total = max(self.samples, 1)
        lines = [f"{self.samples} busy samples every {self._interval * 1000:.0f} ms"]
        for title, counter in (("self", self.self_time), ("inclusive", self.inclusive)):
            lines.append(f"-- {title}")
            for where, count in counter.most_common(top):
                lines.append(f"{100 * count / total:6.1f}%  {where}")
        return "\n".join(lines)

    def write(self, path: str) -> None:
        Path(path).write_text(self.report() + "\n", encoding="utf-8")


def started_from_env(variable: str) -> tuple[Sampler, str] | None:
    """A running sampler and its report's path, when the environment names one."""
    path = os.environ.get(variable)
    return (Sampler().start(), path) if path else None
