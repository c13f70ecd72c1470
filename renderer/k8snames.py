"""Kubernetes name grammars and their messages, as k8s.io/apimachinery's validation words them.

DNS-1035 and DNS-1123 labels, DNS-1123 subdomains, label keys and values: the regexes
KubeRay v1.7 vendors, Go's byte lengths, and the exact error texts. The one home of these
checks: the rules report its messages, `naming.is_dns1123_*` (for the syncer) are its
predicates. Pure string functions.
"""

from __future__ import annotations

import re
from typing import Final

# Kubernetes name grammars (k8s.io/apimachinery validation, as vendored by KubeRay v1.7).
_DNS1035_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT: Final = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_KEY_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """Kubernetes' RegexError text (including its doubled space before `or`)."""
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def byte_size(text: str) -> int:
    """Length as Go's `len` counts it: bytes."""
    return len(text.encode("utf-8"))


def dns1035_label_errors(value: str) -> list[str]:
    """Kubernetes' IsDNS1035Label messages for `value` (empty when valid)."""
    errors = []
    if byte_size(value) > 63:
        errors.append("must be no more than 63 characters")
    if re.fullmatch(_DNS1035_FMT, value) is None:
        errors.append(
            regex_error(
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                "start with an alphabetic character, and end with an alphanumeric character",
                _DNS1035_FMT,
                "my-name",
                "abc-123",
            )
        )
    return errors


def dns1123_label_errors(value: str) -> list[str]:
    """Kubernetes' IsDNS1123Label messages for `value` (empty when valid)."""
    errors = []
    if byte_size(value) > 63:
        errors.append("must be no more than 63 characters")
    if re.fullmatch(_DNS1123_LABEL_FMT, value) is None:
        if re.fullmatch(_DNS1123_SUBDOMAIN_FMT, value) is not None:
            errors.append("must not contain dots")
        else:
            errors.append(
                regex_error(
                    "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                    "characters or '-', and must start and end with an alphanumeric character",
                    _DNS1123_LABEL_FMT,
                    "my-name",
                    "123-abc",
                )
            )
    return errors


def dns1123_subdomain_errors(value: str) -> list[str]:
    """Kubernetes' IsDNS1123Subdomain messages for `value` (empty when valid)."""
    errors = []
    if byte_size(value) > 253:
        errors.append("must be no more than 253 bytes")
    if re.fullmatch(_DNS1123_SUBDOMAIN_FMT, value) is None:
        errors.append(
            regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errors


def label_key_errors(key: str) -> list[str]:
    """Kubernetes' IsQualifiedName messages for a label key (empty when valid)."""
    errors: list[str] = []
    parts = key.split("/")
    if len(parts) > 2:
        return [
            "a valid label key "
            + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend("prefix part " + msg for msg in dns1123_subdomain_errors(prefix))
    if not name:
        errors.append("name part must be non-empty")
    elif byte_size(name) > 63:
        errors.append("name part must be no more than 63 bytes")
    if re.fullmatch(_LABEL_KEY_FMT, name) is None:
        errors.append(
            "name part "
            + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return errors


def label_value_errors(value: str) -> list[str]:
    """Kubernetes' IsValidLabelValue messages (empty when valid)."""
    errors = []
    if byte_size(value) > 63:
        errors.append("must be no more than 63 bytes")
    if re.fullmatch(_LABEL_VALUE_FMT, value) is None:
        errors.append(
            regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errors


def is_dns1123_subdomain(name: str) -> bool:
    """Whether `name` may name a Pod, Service or ConfigMap."""
    return not dns1123_subdomain_errors(name)


def is_dns1123_label(name: str) -> bool:
    """Whether `name` is a DNS-1123 label (63 characters at most)."""
    return not dns1123_label_errors(name)
