"""The only exceptions that leave the syncer's edge modules (`kube/`, `ray/`), and `IntentError`.

`TransientError` means "try again later" (the engine retries with capped backoff);
`PermanentError` means "retrying will not help" (logged once, the target is marked failing).
`error_for_status` is the one mapping from an HTTP status code to these classes.
`IntentError`: an intent ConfigMap that is not what the renderer writes (either kind).
"""

from __future__ import annotations

_TRANSIENT_4XX = frozenset({408, 409, 410, 425, 429})


class IntentError(ValueError):
    """The intent ConfigMap is not what the renderer writes."""


class SyncerError(Exception):
    """Base of the syncer's errors; `status` is the HTTP status code when there was one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class TransientError(SyncerError):
    """A failure that may go away by itself: timeout, refused connection, 409, 429, 5xx.

    `retry_after` is the server's `Retry-After` hint in seconds, when it sent one.
    """

    def __init__(
        self, message: str, *, status: int | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class PermanentError(SyncerError):
    """A failure that repeating the same request will not fix: 400, 401, 403, 404, 422."""


class NotFoundError(PermanentError):
    """The addressed object does not exist (HTTP 404 meaning "not there")."""


def error_for_status(status: int, message: str, *, retry_after: float | None = None) -> SyncerError:
    """Return the error class instance that an HTTP error status stands for.

    408, 409, 425, 429 and every 5xx are transient; 404 is `NotFoundError`; any other
    status is permanent.
    """
    if status == 409:
        return ConflictError(message, status=status, retry_after=retry_after)
    if status == 410:
        return GoneError(message, status=status)
    if status in _TRANSIENT_4XX or status >= 500:
        return TransientError(message, status=status, retry_after=retry_after)
    if status == 404:
        return NotFoundError(message, status=status)
    return PermanentError(message, status=status)


class ConflictError(TransientError):
    """HTTP 409: the object changed since it was read (or already exists); read again."""


class GoneError(TransientError):
    """HTTP 410: a watch or list resourceVersion is too old; list again."""


class SquattedError(PermanentError):
    """The status ConfigMap's name is held by an object the syncer did not write (M1).

    Reported once (an Event on the intent, a metric) and retried with a long backoff; the
    syncer never writes to that object, and takes none of its own steps for the key meanwhile.
    """


class DeferredWriteError(SyncerError):
    """A write of the low class found no spare token of the write budget; nothing was sent.

    Raised only for writes a later pass issues again by itself (releasing the pods of a
    finished job): the pass that meets it is not a failure; it asks to run again after a
    delay of its own (1 s, doubling to 30 s), not the error backoff.
    """


class NotLeaderError(SyncerError):
    """A write was attempted without a fresh leader lease; nothing was written."""
