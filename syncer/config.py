"""The syncer's config file: parsed and checked into a frozen `Config`.

Pure: text in, `Config` and diagnostics out. Every problem is reported at once, in the
renderer's compiler style (`file:line:col: error: $.path: message`). Keys are the field
names of `Config` (snake_case); durations are numbers of seconds. Only `load_config`
reads a file, for the CLI.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, get_args

from renderer import naming
from renderer.errors import Diagnostic, JsonPath, Origin, Problem, format_diagnostics, show
from renderer.sources import parse_text

TtlMode = Literal["stop", "delete"]
TTL_MODES: Final = frozenset(get_args(TtlMode))
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
ALL_NAMESPACES: Final = "*"
DEFAULT_LABEL_SELECTOR: Final = f"{naming.MANAGED_BY}={naming.MANAGED_BY_VALUE}"
CONTEXT: Final = "syncer config"
# client-go's leader election refuses renewDeadline <= JitterFactor * retryPeriod.
_JITTER_FACTOR: Final = 1.2

_NAME: Final = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_KEY: Final = re.compile(rf"^(?:(?P<prefix>[^/]+)/)?(?P<name>{_NAME})$")
_LABEL_VALUE: Final = re.compile(rf"^(?:{_NAME})?$")
_SET_REQUIREMENT: Final = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQUALITY: Final = re.compile(r"^(?P<key>[^=!\s]+)\s*(?P<op>==|=|!=)\s*(?P<value>\S*)$")


@dataclass(frozen=True, slots=True)
class LeaderElection:
    """Lease-based leader election, with client-go's default timings."""

    enabled: bool = True
    lease_name: str = "kuberay-syncer"
    # None: the syncer's own namespace (POD_NAMESPACE).
    lease_namespace: str | None = None
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the syncer reads from its config file; defaults follow KubeRay v1.7.

    `namespaces`: empty means the syncer's own namespace only; `("*",)` means every
    namespace (which needs the cluster-wide RBAC of `kuberay syncer-manifests
    --watch-namespace '*'`). Timers are KubeRay's (rayjob.md §4.7): the 3 s requeue is
    `poll_interval_s`, the dashboard HTTP timeout 2 s, the submitter-finished timeout
    30 s, the transition grace period and status-check timeout 300 s.
    """

    namespaces: tuple[str, ...] = ()
    label_selector: str = DEFAULT_LABEL_SELECTOR
    poll_interval_s: float = 3.0
    idle_resync_s: float = 300.0
    dashboard_timeout_s: float = 2.0
    dashboard_budget_rps: float = 200.0
    dashboard_concurrency: int = 8
    ttl_mode: TtlMode = "stop"
    # A Secret (in the namespace of each cluster) whose key `auth_token` the dashboard wants.
    dashboard_auth_secret: str | None = None
    submitter_finished_timeout_s: float = 30.0
    transition_grace_period_s: float = 300.0
    status_check_timeout_s: float = 300.0
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    health_port: int = 8081
    metrics_port: int = 8080
    bind_address: str = "0.0.0.0"
    log_level: str = "INFO"
    work_queue_limit: int = 100_000
    rayservice_progress_deadline_s: float | None = None
    # KubeRay's CLUSTER_DOMAIN: the head Service's DNS name is <svc>.<ns>.svc.<domain>.
    cluster_domain: str = "cluster.local"
    # The one token bucket of the syncer's API writes (review M2). client-go's 5 qps / 10
    # is sized for a small controller; 10,000 jobs ending at the benchmark's 33 a second,
    # with 3 to 5 writes each, need 100 to 165 writes a second at the peak: the default
    # leaves that room and still caps what a retry storm can send.
    api_write_qps: float = 200.0
    api_write_burst: int = 400

    @property
    def watches_all_namespaces(self) -> bool:
        """Whether the syncer watches every namespace (`namespaces: ["*"]`)."""
        return self.namespaces == (ALL_NAMESPACES,)

    def watched_namespaces(self, own_namespace: str) -> tuple[str, ...] | None:
        """The namespaces to watch, given the syncer's own; None means all of them."""
        if self.watches_all_namespaces:
            return None
        return self.namespaces or (own_namespace,)

    def lease_namespace(self, own_namespace: str) -> str:
        """The namespace of the leader-election Lease."""
        return self.leader_election.lease_namespace or own_namespace


# Fields the daemon reads once at start: a reload that changes them is logged, and the
# new value takes effect at the next restart.
RESTART_FIELDS: Final = (
    "namespaces",
    "label_selector",
    "leader_election",
    "health_port",
    "metrics_port",
    "bind_address",
    "work_queue_limit",
    "dashboard_budget_rps",
    "dashboard_concurrency",
    "dashboard_timeout_s",
    "dashboard_auth_secret",
    "cluster_domain",
    "api_write_qps",
    "api_write_burst",
)
# Fields a reload applies at once (`syncer.cli.reloaded_options`; `log_level` by the CLI).
APPLIED_FIELDS: Final = (
    "poll_interval_s",
    "idle_resync_s",
    "ttl_mode",
    "submitter_finished_timeout_s",
    "transition_grace_period_s",
    "status_check_timeout_s",
    "log_level",
)
# Read and checked, but nothing in this version acts on them (a reload says so).
UNUSED_FIELDS: Final = ("rayservice_progress_deadline_s",)


def restart_required(old: Config, new: Config) -> tuple[str, ...]:
    """The names in `RESTART_FIELDS` whose value differs between `old` and `new`."""
    return changed(old, new, RESTART_FIELDS)


def changed(old: Config, new: Config, names: tuple[str, ...]) -> tuple[str, ...]:
    """The fields among `names` whose value differs between `old` and `new`."""
    return tuple(name for name in names if getattr(old, name) != getattr(new, name))


class ConfigError(Exception):
    """The config file is unreadable or invalid; carries every diagnostic found."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__(format_config_errors(diagnostics))
        self.diagnostics = tuple(diagnostics)


def format_config_errors(diagnostics: list[Diagnostic]) -> str:
    """The compiler-style lines and a closing total, as a bad config is shown to users."""
    count = len(diagnostics)
    total = f"{count} error{'' if count == 1 else 's'} in the syncer config"
    return f"{format_diagnostics(diagnostics)}\n{total}"


def _suggest(word: str, candidates: list[str]) -> str:
    """`; did you mean "x"?`, matching without case and underscores (`pollInterval`)."""

    def fold(text: str) -> str:
        return text.replace("_", "").replace("-", "").lower()

    folded = {fold(c): c for c in candidates}
    key = fold(word)
    match = folded.get(key)
    if match is None:
        prefixed = [c for f, c in folded.items() if f.startswith(key) or key.startswith(f)]
        close = difflib.get_close_matches(key, list(folded), n=1, cutoff=0.6)
        match = folded[close[0]] if close else (prefixed[0] if len(prefixed) == 1 else None)
    return f"; did you mean {show(match)}?" if match else ""


class _Reader:
    """Reads typed fields of one mapping, recording a problem (and using the default) on error."""

    def __init__(self, data: dict[Any, Any], path: JsonPath, problems: list[Problem]) -> None:
        self._data = data
        self._path = path
        self._problems = problems
        self._known: list[str] = []
        self.failed: set[str] = set()

    def at(self, key: str) -> JsonPath:
        return (*self._path, key)

    def problem(self, key: str, message: str, index: int | None = None) -> None:
        """Record a problem at `key` (or at item `index` of the list at `key`)."""
        self.failed.add(key)
        path = self.at(key) if index is None else (*self.at(key), index)
        self._problems.append(Problem(path, message))

    def _raw(self, key: str) -> tuple[bool, object]:
        self._known.append(key)
        if key not in self._data:
            return False, None
        return True, self._data[key]

    def number(
        self, key: str, default: float, *, minimum: float = 0.0, inclusive: bool = False
    ) -> float:
        present, value = self._raw(key)
        if not present:
            return default
        number = self._number(key, value, minimum, inclusive)
        return default if number is None else number

    def optional_number(
        self, key: str, default: float | None, *, minimum: float = 0.0
    ) -> float | None:
        present, value = self._raw(key)
        if not present:
            return default
        if value is None:
            return None
        number = self._number(key, value, minimum, False)
        return default if number is None else number

    def _number(self, key: str, value: object, minimum: float, inclusive: bool) -> float | None:
        wanted = f"a number {'of at least' if inclusive else 'greater than'} {minimum:g}"
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            self.problem(key, f"expected {wanted} (seconds), got {show(value)}")
            return None
        if value < minimum or (value == minimum and not inclusive):
            self.problem(key, f"expected {wanted}, got {show(value)}")
            return None
        return float(value)

    def integer(self, key: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
        present, value = self._raw(key)
        if not present:
            return default
        if maximum is None:
            wanted = f"an integer of at least {minimum}"
        else:
            wanted = f"an integer from {minimum} to {maximum}"
        if not isinstance(value, int) or isinstance(value, bool):
            self.problem(key, f"expected {wanted}, got {show(value)}")
            return default
        if value < minimum or (maximum is not None and value > maximum):
            self.problem(key, f"expected {wanted}, got {value}")
            return default
        return value

    def boolean(self, key: str, default: bool) -> bool:
        present, value = self._raw(key)
        if not present:
            return default
        if not isinstance(value, bool):
            self.problem(key, f"expected true or false, got {show(value)}")
            return default
        return value

    def string(self, key: str, default: str) -> str:
        present, value = self._raw(key)
        if not present:
            return default
        if not isinstance(value, str) or not value:
            self.problem(key, f"expected a non-empty string, got {show(value)}")
            return default
        return value

    def optional_string(self, key: str, default: str | None) -> str | None:
        present, value = self._raw(key)
        if not present:
            return default
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            self.problem(key, f"expected a non-empty string or null, got {show(value)}")
            return default
        return value

    def string_list(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        present, value = self._raw(key)
        if not present:
            return default
        if not isinstance(value, list):
            self.problem(key, f"expected a list of strings, got {show(value)}")
            return default
        items: list[str] = []
        for index, item in enumerate(value):
            if not isinstance(item, str) or not item:
                self.problem(key, f"expected a non-empty string, got {show(item)}", index)
            else:
                items.append(item)
        return tuple(items)

    def mapping(self, key: str) -> dict[Any, Any] | None:
        present, value = self._raw(key)
        if not present or value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(key, f"expected a mapping, got {show(value)}")
            return None
        return value

    def check_unknown(self) -> None:
        for key in self._data:
            if key in self._known:
                continue
            name = key if isinstance(key, str) else show(key)
            hint = _suggest(name, self._known)
            self._problems.append(
                Problem((*self._path, str(key)), f"unknown field {show(name)}{hint}")
            )


def _selector_problem(selector: str) -> str | None:
    """Why `selector` is not a Kubernetes label selector that keeps the renderer's label."""
    requirements: list[str] = []
    depth, start = 0, 0
    for index, char in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            requirements.append(selector[start:index])
            start = index + 1
    requirements.append(selector[start:])
    keeps_renderer_label = False
    for raw in requirements:
        text = raw.strip()
        key, values = text.lstrip("!").strip(), [""]
        if match := _SET_REQUIREMENT.match(text):
            key = match["key"]
            values = [v.strip() for v in match["values"].split(",")]
            if match["op"] == "in" and values == [naming.MANAGED_BY_VALUE]:
                keeps_renderer_label |= key == naming.MANAGED_BY
        elif match := _EQUALITY.match(text):
            key, values = match["key"], [match["value"]]
            if match["op"] != "!=" and values == [naming.MANAGED_BY_VALUE]:
                keeps_renderer_label |= key == naming.MANAGED_BY
        if not text or not _is_label_key(key):
            return f"{show(text)} is not a label selector requirement"
        if not all(len(v) <= 63 and _LABEL_VALUE.match(v) for v in values):
            return f"{show(text)} has an invalid label value"
    if not keeps_renderer_label:
        return (
            f"the selector must require {DEFAULT_LABEL_SELECTOR}: the syncer acts only on "
            "objects the renderer made"
        )
    return None


def _is_label_key(key: str) -> bool:
    match = _LABEL_KEY.match(key)
    if match is None or len(match["name"]) > 63:
        return False
    prefix = match["prefix"]
    return prefix is None or naming.is_dns1123_subdomain(prefix)


def _read_leader_election(reader: _Reader, problems: list[Problem]) -> LeaderElection:
    default = LeaderElection()
    data = reader.mapping("leader_election")
    if data is None:
        return default
    sub = _Reader(data, reader.at("leader_election"), problems)
    enabled = sub.boolean("enabled", default.enabled)
    lease_name = sub.string("lease_name", default.lease_name)
    if "lease_name" not in sub.failed and not naming.is_dns1123_subdomain(lease_name):
        sub.problem("lease_name", f"expected a Kubernetes object name, got {show(lease_name)}")
    lease_namespace = sub.optional_string("lease_namespace", default.lease_namespace)
    if lease_namespace is not None and not naming.is_dns1123_label(lease_namespace):
        sub.problem("lease_namespace", f"expected a namespace name, got {show(lease_namespace)}")
    duration = sub.number("lease_duration_s", default.lease_duration_s)
    renew = sub.number("renew_deadline_s", default.renew_deadline_s)
    retry = sub.number("retry_period_s", default.retry_period_s)
    timings = {"lease_duration_s", "renew_deadline_s", "retry_period_s"}
    if not timings & sub.failed:
        if renew >= duration:
            # Point at whichever of the two the user wrote.
            if "renew_deadline_s" in data:
                message = f"expected less than lease_duration_s ({duration:g}), got {renew:g}"
                sub.problem("renew_deadline_s", message)
            else:
                message = f"expected more than renew_deadline_s ({renew:g}), got {duration:g}"
                sub.problem("lease_duration_s", message)
        if renew <= _JITTER_FACTOR * retry:
            sub.problem(
                "retry_period_s" if "retry_period_s" in data else "renew_deadline_s",
                f"expected renew_deadline_s ({renew:g}) to exceed {_JITTER_FACTOR:g} times "
                f"retry_period_s ({retry:g})",
            )
    sub.check_unknown()
    return LeaderElection(
        enabled=enabled,
        lease_name=lease_name,
        lease_namespace=lease_namespace,
        lease_duration_s=duration,
        renew_deadline_s=renew,
        retry_period_s=retry,
    )


def _read_namespaces(reader: _Reader) -> tuple[str, ...]:
    namespaces = reader.string_list("namespaces", ())
    if ALL_NAMESPACES in namespaces and len(namespaces) > 1:
        reader.problem("namespaces", f'"{ALL_NAMESPACES}" (all namespaces) must be alone')
        return ()
    seen: set[str] = set()
    for index, name in enumerate(namespaces):
        if name != ALL_NAMESPACES and not naming.is_dns1123_label(name):
            reader.problem("namespaces", f"expected a namespace name, got {show(name)}", index)
        elif name in seen:
            reader.problem("namespaces", f"duplicate namespace {show(name)}", index)
        seen.add(name)
    return namespaces


def _read_config(data: dict[Any, Any], problems: list[Problem]) -> Config:
    d = Config()
    r = _Reader(data, (), problems)
    namespaces = _read_namespaces(r)
    selector = r.string("label_selector", d.label_selector)
    if "label_selector" not in r.failed and (why := _selector_problem(selector)):
        r.problem("label_selector", why)
    ttl_mode = r.string("ttl_mode", d.ttl_mode)
    if "ttl_mode" not in r.failed and ttl_mode not in TTL_MODES:
        r.problem("ttl_mode", f'expected "stop" or "delete", got {show(ttl_mode)}')
        ttl_mode = d.ttl_mode
    secret = r.optional_string("dashboard_auth_secret", d.dashboard_auth_secret)
    if secret is not None and not naming.is_dns1123_subdomain(secret):
        r.problem("dashboard_auth_secret", f"expected a Secret name, got {show(secret)}")
    bind_address = r.string("bind_address", d.bind_address)
    try:
        ipaddress.ip_address(bind_address)
    except ValueError:
        r.problem("bind_address", f"expected an IP address, got {show(bind_address)}")
    log_level = r.string("log_level", d.log_level).upper()
    if "log_level" not in r.failed and log_level not in LOG_LEVELS:
        r.problem(
            "log_level", f"expected one of {', '.join(LOG_LEVELS)}, got {show(data['log_level'])}"
        )
    cluster_domain = r.string("cluster_domain", d.cluster_domain)
    if not naming.is_dns1123_subdomain(cluster_domain):
        r.problem("cluster_domain", f"expected a DNS domain, got {show(cluster_domain)}")
    health_port = r.integer("health_port", d.health_port, minimum=0, maximum=65535)
    metrics_port = r.integer("metrics_port", d.metrics_port, minimum=0, maximum=65535)
    write_qps = r.number("api_write_qps", d.api_write_qps)
    write_burst = r.integer("api_write_burst", d.api_write_burst, minimum=1)
    if health_port == metrics_port != 0:
        r.problem("metrics_port", f"expected a port other than health_port ({health_port})")
    config = Config(
        namespaces=namespaces,
        label_selector=selector,
        poll_interval_s=r.number("poll_interval_s", d.poll_interval_s),
        idle_resync_s=r.number("idle_resync_s", d.idle_resync_s),
        dashboard_timeout_s=r.number("dashboard_timeout_s", d.dashboard_timeout_s),
        dashboard_budget_rps=r.number("dashboard_budget_rps", d.dashboard_budget_rps),
        dashboard_concurrency=r.integer(
            "dashboard_concurrency", d.dashboard_concurrency, minimum=1
        ),
        ttl_mode="delete" if ttl_mode == "delete" else "stop",
        dashboard_auth_secret=secret,
        submitter_finished_timeout_s=r.number(
            "submitter_finished_timeout_s", d.submitter_finished_timeout_s, inclusive=True
        ),
        transition_grace_period_s=r.number(
            "transition_grace_period_s", d.transition_grace_period_s, inclusive=True
        ),
        status_check_timeout_s=r.number("status_check_timeout_s", d.status_check_timeout_s),
        leader_election=_read_leader_election(r, problems),
        health_port=health_port,
        metrics_port=metrics_port,
        bind_address=bind_address,
        log_level=log_level,
        work_queue_limit=r.integer("work_queue_limit", d.work_queue_limit, minimum=1),
        rayservice_progress_deadline_s=r.optional_number(
            "rayservice_progress_deadline_s", d.rayservice_progress_deadline_s
        ),
        cluster_domain=cluster_domain,
        api_write_qps=write_qps,
        api_write_burst=write_burst,
    )
    r.check_unknown()
    return config


def parse_config(text: str, source: str) -> tuple[Config | None, list[Diagnostic]]:
    """Parse and check a config file's text; `source` names it in diagnostics.

    Returns the config and no diagnostics, or None and every problem found. An empty
    file gives the defaults.
    """
    documents, diagnostics = parse_text(text, source)
    if diagnostics:
        located = [dataclasses.replace(d.origin, context=CONTEXT) for d in diagnostics]
        return None, [Diagnostic(o, d.problem) for o, d in zip(located, diagnostics, strict=True)]
    if len(documents) > 1:
        extra = documents[1]
        origin = dataclasses.replace(extra.origin, context=CONTEXT)
        message = f"expected one YAML document, got {len(documents)}"
        return None, [Diagnostic(origin, Problem((), message))]
    if not documents or documents[0].data is None:
        return Config(), []
    document = documents[0]
    origin = dataclasses.replace(document.origin, context=CONTEXT)
    if not isinstance(document.data, dict):
        message = f"expected a mapping of settings, got {show(document.data)}"
        return None, [Diagnostic(origin, Problem((), message))]
    problems: list[Problem] = []
    config = _read_config(document.data, problems)
    if problems:
        return None, [Diagnostic(origin, problem) for problem in problems]
    return config, []


def load_config(path: str | Path) -> Config:
    """Read and parse the config file at `path`.

    Raises:
        ConfigError: the file cannot be read or is invalid; carries every diagnostic.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problem = Problem((), f"cannot read the config file: {exc}")
        raise ConfigError([Diagnostic(Origin(str(path), 1, context=CONTEXT), problem)]) from exc
    config, diagnostics = parse_config(text, str(path))
    if config is None:
        raise ConfigError(diagnostics)
    return config
