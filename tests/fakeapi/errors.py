"""Kubernetes API errors of the fake API server, rendered as real `Status` objects.

Owns the one exception type (`ApiError`) the fake server raises and the constructors for
the reasons a real kube-apiserver uses (NotFound, AlreadyExists, Conflict, Invalid, ...).
It must not know about HTTP routing or storage.
"""

from __future__ import annotations

from typing import Any

Manifest = dict[str, Any]

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error the server answers with a `Status` object and an HTTP status code."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: Manifest | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason_for(code) if reason is None else reason
        self.details = details
        self.headers = headers or {}

    def status(self) -> Manifest:
        """Return the `Status` object a real API server sends for this error."""
        return status_object(self.code, self.reason, self.message, self.details)


def reason_for(code: int) -> str:
    """Return the Kubernetes `StatusReason` conventionally paired with an HTTP code."""
    return _REASONS.get(code, "Unknown" if code < 500 else "InternalError")


def status_object(
    code: int, reason: str, message: str, details: Manifest | None = None
) -> Manifest:
    """Build a `v1 Status` object (`status: Failure` for codes >= 300)."""
    status: Manifest = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 300 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if not message:
        del status["message"]
    if not reason:
        del status["reason"]
    if details:
        status["details"] = details
    return status


def _details(resource: str, name: str, group: str) -> Manifest:
    details: Manifest = {"name": name, "kind": resource}
    if group:
        details["group"] = group
    return details


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    """`404 NotFound`: `pods "x" not found`."""
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(404, f'{qualified} "{name}" not found', details=_details(resource, name, group))


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    """`409 AlreadyExists`: `pods "x" already exists`."""
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(
        409,
        f'{qualified} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(resource, name, group),
    )


def conflict(resource: str, name: str, group: str = "", why: str = "") -> ApiError:
    """`409 Conflict`: the optimistic-concurrency failure of a stale `resourceVersion`."""
    qualified = f"{resource}.{group}" if group else resource
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
        reason="Conflict",
        details=_details(resource, name, group),
    )


def invalid(kind: str, name: str, causes: list[Manifest], group: str = "") -> ApiError:
    """`422 Invalid` with field causes, worded like the real validation errors."""
    text = "; ".join(cause["message"] for cause in causes)
    if len(causes) > 1:
        text = "[" + ", ".join(cause["message"] for cause in causes) + "]"
    details: Manifest = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(422, f'{kind} "{name}" is invalid: {text}', details=details)


def cause(field: str, message: str, reason: str = "FieldValueInvalid") -> Manifest:
    """One `StatusCause` whose message carries the field path, as the real server does."""
    return {"reason": reason, "message": f"{field}: {message}", "field": field}


def bad_request(message: str) -> ApiError:
    """`400 BadRequest`."""
    return ApiError(400, message)


def expired(message: str) -> ApiError:
    """`410 Expired`: a resourceVersion or continue token older than the kept history."""
    return ApiError(410, message, reason="Expired")
