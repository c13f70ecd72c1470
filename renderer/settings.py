"""Render settings: each render option under its CLI, KRM and Argo CD plugin names.

The one check that turns their values into `RenderOptions` lives here too.

`SETTINGS` lists every `kuberay render` option that changes what is rendered or whether a
render fails, with its click parameter name, its flag, its `functionConfig` key and its
Argo CD plugin parameter. `render_options` takes values keyed by the click parameter name
(what click hands the CLI; a missing key means the option's default) and raises
`SettingError` with the CLI's own messages, so the three entry points refuse the same
values with the same words. No click here: the KRM function and the plugin never load it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from renderer import k8snames
from renderer.options import (
    BATCH_SCHEDULERS,
    DEFAULT_FEATURE_GATES,
    DEFAULT_SYNCER_NAMESPACE,
    DEFAULT_SYNCER_POD_LABELS,
    RenderOptions,
)


@dataclass(frozen=True, slots=True)
class Setting:
    """One render option under its three names.

    `kind` is how its value is written: "string" (non-empty text), "text" (text, empty
    allowed and meaningful), "bool" (a --x/--no-x pair: `off` is the second flag), "flag"
    (a flag without a negative form), "count" (an integer >= 1), "labels" (KEY=VALUE items).
    """

    param: str
    flag: str
    krm: str
    argocd: str
    kind: str
    off: str = ""


SETTINGS: Final = (
    Setting("namespace", "--namespace", "namespace", "namespace", "string"),
    Setting("cluster_domain", "--cluster-domain", "clusterDomain", "cluster-domain", "string"),
    Setting("feature_gates", "--feature-gates", "featureGates", "feature-gates", "string"),
    Setting(
        "kubernetes_version",
        "--kubernetes-version",
        "kubernetesVersion",
        "kubernetes-version",
        "string",
    ),
    Setting(
        "init_container_injection",
        "--init-container-injection",
        "initContainerInjection",
        "init-container-injection",
        "bool",
        "--no-init-container-injection",
    ),
    Setting(
        "probes_injection",
        "--probes-injection",
        "probesInjection",
        "probes-injection",
        "bool",
        "--no-probes-injection",
    ),
    Setting(
        "login_shell", "--login-shell", "loginShell", "login-shell", "bool", "--no-login-shell"
    ),
    Setting(
        "head_cluster_ip_service",
        "--head-cluster-ip-service",
        "headClusterIPService",
        "head-cluster-ip-service",
        "bool",
        "--headless-head-service",
    ),
    Setting("max_pods", "--max-pods", "maxPods", "max-pods", "count"),
    Setting("max_objects", "--max-objects", "maxObjects", "max-objects", "count"),
    Setting("max_input_bytes", "--max-input-bytes", "maxInputBytes", "max-input-bytes", "count"),
    Setting("batch_scheduler", "--batch-scheduler", "batchScheduler", "batch-scheduler", "text"),
    Setting(
        "enable_batch_scheduler",
        "--enable-batch-scheduler",
        "enableBatchScheduler",
        "enable-batch-scheduler",
        "flag",
    ),
    Setting("kai_podgroups", "--kai-podgroups", "kaiPodgroups", "kai-podgroups", "flag"),
    Setting("kueue_queue", "--kueue-queue", "kueueQueue", "kueue-queue", "text"),
    Setting(
        "syncer_namespace", "--syncer-namespace", "syncerNamespace", "syncer-namespace", "text"
    ),
    Setting(
        "syncer_pod_labels",
        "--syncer-pod-label",
        "syncerPodLabels",
        "syncer-pod-labels",
        "labels",
    ),
    Setting("strict", "--strict", "strict", "strict", "flag"),
)
BY_PARAM: Final = MappingProxyType({s.param: s for s in SETTINGS})


class SettingError(ValueError):
    """A setting's value cannot be used; `usage` marks a conflict between two settings."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


def parse_gates(text: str | None) -> dict[str, bool]:
    """`Name=true,Name=false` into feature gates (only the named ones)."""
    gates: dict[str, bool] = {}
    if not text:
        return gates
    for item in text.split(","):
        name, sep, value = item.strip().partition("=")
        if not sep or value.lower() not in ("true", "false"):
            raise SettingError(f"expected Name=true or Name=false, got {item.strip()!r}")
        if name not in DEFAULT_FEATURE_GATES:
            known = ", ".join(sorted(DEFAULT_FEATURE_GATES))
            raise SettingError(f"unknown feature gate {name!r}; known gates: {known}")
        gates[name] = value.lower() == "true"
    return gates


def _syncer_namespace(values: Mapping[str, object]) -> str:
    namespace = str(values.get("syncer_namespace", DEFAULT_SYNCER_NAMESPACE) or "")
    errors = k8snames.dns1123_label_errors(namespace) if namespace else []
    if errors:
        raise SettingError(f"{namespace!r} cannot name a namespace: {errors[0]}")
    return namespace


def _syncer_pod_labels(values: Mapping[str, object]) -> MappingProxyType[str, str]:
    given = values.get("syncer_pod_labels") or ()
    labels: dict[str, str] = {}
    for item in given if isinstance(given, Iterable) else ():
        key, sep, value = str(item).partition("=")
        errors = k8snames.label_key_errors(key) + k8snames.label_value_errors(value)
        if not sep or errors:
            reason = errors[0] if errors else "expected KEY=VALUE"
            raise SettingError(f"--syncer-pod-label {item!r}: {reason}")
        labels[key] = value
    return MappingProxyType(labels) if labels else DEFAULT_SYNCER_POD_LABELS


def _kueue_queue(values: Mapping[str, object]) -> str:
    queue = str(values.get("kueue_queue") or "")
    errors = k8snames.dns1123_subdomain_errors(queue) if queue else []
    if errors:
        raise SettingError(f"{queue!r} cannot name a LocalQueue: {errors[0]}")
    return queue


def _kai_podgroups(values: Mapping[str, object]) -> bool:
    wanted = bool(values.get("kai_podgroups"))
    if wanted and values.get("batch_scheduler") != "kai-scheduler":
        raise SettingError("--kai-podgroups needs --batch-scheduler kai-scheduler", usage=True)
    return wanted


def _batch_scheduler(values: Mapping[str, object]) -> str:
    """KubeRay's flag pair: --enable-batch-scheduler (deprecated) means volcano; not both."""
    name = str(values.get("batch_scheduler") or "")
    if name and name not in BATCH_SCHEDULERS:
        raise SettingError(
            f"{name!r} is not a batch scheduler; known: {', '.join(BATCH_SCHEDULERS)}"
        )
    if values.get("enable_batch_scheduler"):
        if name:
            raise SettingError(
                "both feature flags enable-batch-scheduler (deprecated) and batch-scheduler "
                "are set. Please use batch-scheduler only",
                usage=True,
            )
        return "volcano"
    return name


def _count(values: Mapping[str, object], param: str, default: int) -> int:
    value = values.get(param)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SettingError(f"{BY_PARAM[param].flag}: expected an integer >= 1, got {value!r}")
    return value


def _text(values: Mapping[str, object], param: str, default: str) -> str:
    value = values.get(param)
    return default if value is None else str(value)


def _on(values: Mapping[str, object], param: str, default: bool) -> bool:
    value = values.get(param)
    return default if value is None else bool(value)


def render_options(values: Mapping[str, object]) -> RenderOptions:
    """The `RenderOptions` for settings keyed by click parameter name (missing: default)."""
    gates = dict(DEFAULT_FEATURE_GATES) | parse_gates(values.get("feature_gates"))  # type: ignore[arg-type]
    defaults = RenderOptions()
    return RenderOptions(
        feature_gates=MappingProxyType(gates),
        cluster_domain=_text(values, "cluster_domain", defaults.cluster_domain),
        namespace=_text(values, "namespace", defaults.namespace),
        init_container_injection=_on(
            values, "init_container_injection", defaults.init_container_injection
        ),
        probes_injection=_on(values, "probes_injection", defaults.probes_injection),
        login_shell=_on(values, "login_shell", defaults.login_shell),
        head_cluster_ip_service=_on(
            values, "head_cluster_ip_service", defaults.head_cluster_ip_service
        ),
        kubernetes_version=_text(values, "kubernetes_version", defaults.kubernetes_version),
        max_pods=_count(values, "max_pods", defaults.max_pods),
        max_objects=_count(values, "max_objects", defaults.max_objects),
        batch_scheduler=_batch_scheduler(values),
        kueue_queue=_kueue_queue(values),
        kai_podgroups=_kai_podgroups(values),
        syncer_namespace=_syncer_namespace(values),
        syncer_pod_labels=_syncer_pod_labels(values),
    )
