"""KubeRay's semantic rules for a RayCluster spec, plus the renderer's own refusals.

Mirrors `ValidateRayClusterMetadata`, `ValidateRayClusterSpec`, the upgrade-strategy and
autoscaler-v1 checks of the reconcile and the webhook's group-name rule (reference
raycluster.md §6), in KubeRay's order, but reports every problem at the offending field
instead of stopping at the first; `check_parsed_cluster` holds what KubeRay finds only while
reconciling. Pure: documents and models in, `Problem`s out; it builds nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from renderer import k8snames, naming
from renderer.errors import JsonPath, Problem, Severity, show
from renderer.goformat import go_list, go_quote
from renderer.manifest import Manifest
from renderer.model.raycluster import RayCluster
from renderer.objects import autoscalingconfig
from renderer.options import RenderOptions
from renderer.rules import document, limits, versions
from renderer.rules.document import as_dict, as_list, as_text, gate_hint

MAX_RAYCLUSTER_NAME: Final = 53  # keeps `<name>-serve-svc` within 63 characters

_RAY_REDIS_ADDRESS: Final = "RAY_REDIS_ADDRESS"
_REDIS_PASSWORD: Final = "REDIS_PASSWORD"
_REDIS_USERNAME: Final = "REDIS_USERNAME"
_RAY_GCS_STORAGE: Final = "RAY_gcs_storage"
_RAY_GCS_STORAGE_PATH: Final = "RAY_gcs_storage_path"
_GCS_STORAGE_VOLUME: Final = "gcs-storage"
_GCS_STORAGE_PATH: Final = "/data/gcs"
_AUTOSCALER_V2_ENV: Final = "RAY_enable_autoscaler_v2"
_AUTOSCALER_CMD_ENV: Final = "KUBERAY_GEN_AUTOSCALER_START_CMD"
_COLLECTOR_CONTAINER: Final = "ray-history-collector"
_COLLECTOR_MANAGED_ENV: Final = (
    "POD_IP",
    "FQ_RAY_IP",
    "RAY_CLUSTER_NAME",
    "RAY_CLUSTER_NAMESPACE",
    "RAY_ROLE",
    "OWNER_KIND",
    "OWNER_NAME",
    "EVENTS_PORT",
)
_TLS_ENV: Final = ("RAY_USE_TLS", "RAY_TLS_SERVER_CERT", "RAY_TLS_SERVER_KEY", "RAY_TLS_CA_CERT")
_TLS_VOLUME: Final = "ray-tls"
_TLS_PATH: Final = "/etc/ray/tls"
_RESOURCE_PARAMS: Final = ("num-cpus", "num-gpus", "memory", "resources")
_TRUE_VALUES: Final = ("1", "true")


def _env(container: Manifest, name: str) -> Iterator[tuple[int, Manifest]]:
    """Every entry named `name` in a container's `env`, with its index."""
    for index, entry in enumerate(as_list(container.get("env"))):
        if isinstance(entry, dict) and entry.get("name") == name:
            yield index, entry


def _first_env(container: Manifest, name: str) -> tuple[int, Manifest] | None:
    return next(_env(container, name), None)


@dataclass(slots=True)
class _Check:
    """One run of the rules over one cluster spec."""

    spec: Manifest
    annotations: Manifest
    options: RenderOptions
    creator: str
    at: JsonPath  # path of the cluster spec inside the document
    problems: list[Problem] = field(default_factory=list)

    def add(self, path: JsonPath, message: str, severity: Severity = "error") -> None:
        self.problems.append(Problem(path, message, severity))

    @property
    def head(self) -> Manifest:
        return as_dict(self.spec.get("headGroupSpec"))

    @property
    def head_pod(self) -> Manifest:
        return as_dict(as_dict(self.head.get("template")).get("spec"))

    @property
    def head_pod_at(self) -> JsonPath:
        return (*self.at, "headGroupSpec", "template", "spec")

    @property
    def head_container(self) -> Manifest:
        containers = as_list(self.head_pod.get("containers"))
        return as_dict(containers[0]) if containers else {}

    @property
    def head_container_at(self) -> JsonPath:
        return (*self.head_pod_at, "containers", 0)

    @property
    def groups(self) -> list[tuple[JsonPath, Manifest]]:
        return [
            ((*self.at, "workerGroupSpecs", index), as_dict(group))
            for index, group in enumerate(as_list(self.spec.get("workerGroupSpecs")))
            if not isinstance(group, document.Unchecked)  # a group the schema refused
        ]

    @property
    def autoscaling(self) -> bool:
        return self.spec.get("enableInTreeAutoscaling") is True

    @property
    def autoscaler_version(self) -> object:
        return as_dict(self.spec.get("autoscalerOptions")).get("version")

    def autoscaler_v2_by_env(self) -> bool:
        found = _first_env(self.head_container, _AUTOSCALER_V2_ENV)
        return found is not None and as_text(found[1].get("value")) in _TRUE_VALUES


def check_raycluster(
    doc: Manifest,
    options: RenderOptions,
    *,
    creator: str = "RayCluster",
    base: JsonPath = (),
) -> list[Problem]:
    """Check a RayCluster (or the cluster spec embedded in a RayJob / RayService).

    Args:
        doc: the manifest, already valid against the JSON Schema, CRD defaults not applied.
            For an embedded spec: `{"metadata": <owner metadata>, "spec": <cluster spec>}`.
        options: feature gates and other render options.
        creator: KubeRay's `ray.io/originated-from-crd`: RayCluster, RayJob or RayService.
        base: path of the cluster spec in the real document; `()` for a RayCluster.
    """
    spec_at: JsonPath = base or ("spec",)
    spec = as_dict(doc.get("spec"))
    metadata = as_dict(doc.get("metadata"))
    standalone = creator == "RayCluster" and not base
    problems: list[Problem] = []

    managed = document.check_managed_by(spec, (*spec_at, "managedBy"), "RayCluster")
    if managed is not None and (standalone or managed.severity == "error"):
        if standalone:
            return [managed]
        problems.append(managed)
    elif managed is not None:
        problems.append(
            Problem(
                managed.path,
                f"managedBy is {show(spec.get('managedBy'))}: KubeRay would create a RayCluster "
                f"that it does not reconcile, so the {creator} never gets Pods; "
                f"remove managedBy from the cluster spec (set it on the {creator} instead)",
            )
        )
    if standalone:
        problems.extend(document.check_object_name(doc, "RayCluster", MAX_RAYCLUSTER_NAME))

    check = _Check(spec, as_dict(metadata.get("annotations")), options, creator, spec_at)
    _check_head(check)
    _check_autoscaling_support(check)
    _check_groups(check)
    _check_gcs_ft(check)
    _check_autoscaler(check)
    _check_history_server(check)
    _check_auth(check)
    _check_network_policy(check)
    _check_tls(check)
    _check_upgrade_strategy(check)
    _check_autoscaler_v1_restart_policy(check)
    _check_literal_credentials(check)
    # The renderer's own bound last, after KubeRay's rules (their order is KubeRay's).
    return problems + check.problems + limits.check_cluster_size(spec, spec_at, options)


def _check_group_resources(check: _Check, at: JsonPath, group: Manifest, name: str) -> None:
    """Rule 2 / 4f: resources in both rayStartParams and the group's `resources` field."""
    params = as_dict(group.get("rayStartParams"))
    if as_dict(group.get("resources")) and any(as_text(params.get(k)) for k in _RESOURCE_PARAMS):
        check.add(
            (*at, "resources"),
            f"resource fields should not be set in both rayStartParams and Resources for {name} "
            "group; please use only one",
        )


def _check_group_labels(check: _Check, at: JsonPath, group: Manifest, name: str) -> None:
    """Rule 3 / 4g: no `labels` rayStartParam; the group's labels must be Kubernetes labels."""
    if "labels" in as_dict(group.get("rayStartParams")):
        check.add(
            (*at, "rayStartParams", "labels"),
            f"rayStartParams['labels'] is not supported for {name} group; please use the "
            "top-level Labels field instead",
        )
    for key, raw in as_dict(group.get("labels")).items():
        value = as_text(raw)
        for error in k8snames.label_key_errors(key):
            check.add(
                (*at, "labels", key),
                f"invalid label key for {name} group: '{key}', error: {error}",
            )
        for error in k8snames.label_value_errors(value):
            check.add(
                (*at, "labels", key),
                f"invalid label value for key '{key}' in {name} group: '{value}', error: {error}",
            )


def _check_head(check: _Check) -> None:
    """Rules 1-3: the head group."""
    if not as_list(check.head_pod.get("containers")):
        check.add(
            (*check.head_pod_at, "containers"),
            "headGroupSpec should have at least one container; add the Ray container",
        )
    head_at = (*check.at, "headGroupSpec")
    _check_group_resources(check, head_at, check.head, "Head")
    _check_group_labels(check, head_at, check.head, "Head")


def _check_autoscaling_support(check: _Check) -> None:
    """The renderer's limits on autoscaling (reference autoscaling.md §5.2), and Ray's reads.

    Ray's autoscaler v2 runs with the project's node provider; multi-host groups, autoscaler
    v1 and in-place resize are refused for now. A spec whose resources Ray's derivation
    cannot read (its autoscaler would crash-loop) is refused at the field.
    """
    if not check.autoscaling:
        return
    options = as_dict(check.spec.get("autoscalerOptions"))
    options_at = (*check.at, "autoscalerOptions")
    if check.autoscaler_version == "v1":
        check.add(
            (*options_at, "version"),
            "kuberay render runs Ray's autoscaler v2 only; autoscaler v1 is not supported: set "
            "autoscalerOptions.version to v2 (or leave it unset)",
        )
    found = _first_env(check.head_container, _AUTOSCALER_V2_ENV)
    if (
        check.autoscaler_version is None
        and found is not None
        and as_text(found[1].get("value")).lower() not in _TRUE_VALUES
    ):
        check.add(
            (*check.head_container_at, "env", found[0]),
            f"{_AUTOSCALER_V2_ENV}={show(as_text(found[1].get('value')))} asks for autoscaler "
            "v1, which kuberay render does not support: set autoscalerOptions.version to v2",
        )
    if naming.ANN_IPPR in check.annotations:
        check.add(
            ("metadata", "annotations", naming.ANN_IPPR),
            f"in-place pod resize ({naming.ANN_IPPR}) needs KubeRay's own autoscaler provider "
            "and is not supported by kuberay render; remove the annotation",
        )
    image = options.get("image")
    head_image = check.head_container.get("image")
    if image is not None and image != head_image:
        check.add(
            (*options_at, "image"),
            f"the autoscaler image {show(image)} differs from the head's {show(head_image)}: "
            "the autoscaler's Ray must match the GCS it talks to",
            "warning",
        )
    for at, group in check.groups:
        hosts = group.get("numOfHosts", 1)
        if isinstance(hosts, int) and hosts > 1:
            check.add(
                (*at, "numOfHosts"),
                f"worker group {as_text(group.get('groupName'))} has numOfHosts {hosts}: "
                "kuberay render does not autoscale multi-host groups yet; set "
                "enableInTreeAutoscaling to false or numOfHosts to 1",
            )
    checked = dict(check.spec)
    checked["workerGroupSpecs"] = [group for _, group in check.groups]
    if not as_list(check.head_pod.get("containers")):
        return  # rule 1 reports it; Ray reads the first container
    if any(
        not as_list(as_dict(g.get("template")).get("spec", {}).get("containers"))
        for g in checked["workerGroupSpecs"]
    ):
        return  # rule 4a reports it
    _, problems = autoscalingconfig.derive("", "", checked, check.at)
    check.problems.extend(problems)


def _check_groups(check: _Check) -> None:
    """Rule 4 for each worker group, plus the webhook's unique-name rule."""
    seen: dict[str, int] = {}
    for index, raw in enumerate(as_list(check.spec.get("workerGroupSpecs"))):
        at: JsonPath = (*check.at, "workerGroupSpecs", index)
        group = as_dict(raw)
        name = as_text(group.get("groupName"))
        if name in seen:
            check.add(
                (*at, "groupName"),
                f"worker group names must be unique: {show(name)} is also the name of "
                f"workerGroupSpecs[{seen[name]}]; rename one of them",
            )
        else:
            seen[name] = index
        if isinstance(raw, document.Unchecked):
            continue  # the schema refused the group: only its name is checked
        if not as_list(as_dict(as_dict(group.get("template")).get("spec")).get("containers")):
            check.add(
                (*at, "template", "spec", "containers"),
                "workerGroupSpec should have at least one container; add the Ray container",
            )
        # Rule 4b (min/max unset) cannot fire: the CRD defaults both.
        minimum = group.get("minReplicas", 0)
        maximum = group.get("maxReplicas", 2147483647)
        if minimum < 0:
            check.add(
                (*at, "minReplicas"), f"worker group {name} has negative minReplicas {minimum}"
            )
        if maximum < 0:
            check.add(
                (*at, "maxReplicas"), f"worker group {name} has negative maxReplicas {maximum}"
            )
        if minimum > maximum:
            check.add(
                (*at, "minReplicas"),
                f"worker group {name} has minReplicas {minimum} greater than maxReplicas {maximum}",
            )
        _check_group_resources(check, at, group, name)
        _check_group_labels(check, at, group, name)
        _check_idle_timeout(check, at, group, name)
        _check_priority(check, at, group, name)


def _check_idle_timeout(check: _Check, at: JsonPath, group: Manifest, name: str) -> None:
    """Rule 4h: per-group idleTimeoutSeconds needs autoscaler v2."""
    timeout = group.get("idleTimeoutSeconds")
    if timeout is None:
        return
    if timeout < 0:
        check.add(
            (*at, "idleTimeoutSeconds"),
            f"worker group {name}: idleTimeoutSeconds must be non-negative, got {timeout}",
        )
    elif check.autoscaler_version != "v2" and not check.autoscaler_v2_by_env():
        check.add(
            (*at, "idleTimeoutSeconds"),
            f"worker group {name}: idleTimeoutSeconds is set, but autoscaler v2 is not enabled. "
            "Please set .spec.autoscalerOptions.version to 'v2' (or set "
            f"{_AUTOSCALER_V2_ENV} environment variable to 'true' in the head pod if using "
            "KubeRay < 1.4.0)",
        )


def _check_priority(check: _Check, at: JsonPath, group: Manifest, name: str) -> None:
    """Rule 4i: per-group priority needs Ray >= 2.56.0 and autoscaler v2."""
    priority = group.get("priority")
    if not priority:
        return
    version = as_text(check.spec.get("rayVersion"))
    version_at = (*check.at, "rayVersion")
    if not version:
        check.add(
            (*at, "priority"),
            f"worker group {name}: priority is set, but RayVersion was not specified. "
            "Ray version 2.56.0 or later is required; set spec.rayVersion",
        )
        return
    error = versions.version_error(version)
    if error is not None:
        check.add(
            version_at,
            f"worker group {name}: priority is set, but RayVersion format is invalid: "
            f"{version}, {error}",
        )
        return
    if not versions.at_least(version, "2.56.0"):
        check.add(
            version_at,
            f"worker group {name}: priority is set, but minimum Ray version is 2.56.0, "
            f"got {version}",
        )
        return
    if check.autoscaler_version != "v2" and not check.autoscaler_v2_by_env():
        check.add(
            (*at, "priority"),
            f"worker group {name}: priority is set to {priority}, but autoscaler v2 is not "
            "enabled. Priority is only supported with autoscaler v2 enabled",
        )


def _check_gcs_ft(check: _Check) -> None:
    """Rules 5-12 and the renderer's storage-namespace refusals."""
    options = check.spec.get("gcsFaultToleranceOptions")
    has_options = options is not None
    ft_key, ns_key = naming.ANN_FT_ENABLED, naming.ANN_STORAGE_NS
    ft_annotation = as_text(check.annotations.get(ft_key))
    ann_at: JsonPath = ("metadata", "annotations")
    head_params_at = (*check.at, "headGroupSpec", "rayStartParams")
    params = as_dict(check.head.get("rayStartParams"))
    container = check.head_container
    env_at = (*check.head_container_at, "env")

    if ft_annotation and has_options:
        check.add(
            (*ann_at, ft_key),
            f"{ft_key} annotation and GcsFaultToleranceOptions are both set. Please use "
            "only GcsFaultToleranceOptions to configure GCS fault tolerance",
        )
    ft_enabled = has_options or ft_annotation.lower() == "true"
    if not ft_enabled:
        for index, _ in _env(container, _RAY_REDIS_ADDRESS):
            check.add(
                (*env_at, index),
                f"{_RAY_REDIS_ADDRESS} is set which implicitly enables GCS fault tolerance, but "
                "GcsFaultToleranceOptions is not set. Please set GcsFaultToleranceOptions to "
                "enable GCS fault tolerance",
            )

    if has_options:
        opts = as_dict(options)
        opts_at = (*check.at, "gcsFaultToleranceOptions")
        if as_text(params.get("redis-password")):
            check.add(
                (*head_params_at, "redis-password"),
                "cannot set `redis-password` in rayStartParams when GcsFaultToleranceOptions is "
                "enabled - use GcsFaultToleranceOptions.RedisPassword instead",
            )
        for index, _ in _env(container, _REDIS_PASSWORD):
            check.add(
                (*env_at, index),
                f"cannot set `{_REDIS_PASSWORD}` env var in head Pod when GcsFaultToleranceOptions "
                "is enabled - use GcsFaultToleranceOptions.RedisPassword instead",
            )
        for index, _ in _env(container, _RAY_REDIS_ADDRESS):
            check.add(
                (*env_at, index),
                f"cannot set `{_RAY_REDIS_ADDRESS}` env var in head Pod when "
                "GcsFaultToleranceOptions is enabled - use GcsFaultToleranceOptions.RedisAddress "
                "instead",
            )
        if as_text(check.annotations.get(ns_key)):
            check.add(
                (*ann_at, ns_key),
                f"cannot set `{ns_key}` annotation when GcsFaultToleranceOptions is "
                "enabled - use GcsFaultToleranceOptions.ExternalStorageNamespace instead",
            )
        if as_text(opts.get("backend")) == "rocksdb":
            _check_rocksdb(check, opts, opts_at)
        else:
            if opts.get("storage") is not None:
                check.add(
                    (*opts_at, "storage"),
                    "cannot set GcsFaultToleranceOptions.Storage when backend is 'redis' - it "
                    "only applies to the 'rocksdb' backend",
                )

    if as_text(params.get("redis-username")):
        check.add(
            (*head_params_at, "redis-username"),
            "cannot set redis username in rayStartParams or environment variables - use "
            "GcsFaultToleranceOptions.RedisUsername instead",
        )
    for index, _ in _env(container, _REDIS_USERNAME):
        check.add(
            (*env_at, index),
            "cannot set redis username in rayStartParams or environment variables - use "
            "GcsFaultToleranceOptions.RedisUsername instead",
        )


def _check_rocksdb(check: _Check, opts: Manifest, opts_at: JsonPath) -> None:
    """Rule 11, embedded RocksDB backend."""
    gate = "GCSFaultToleranceEmbeddedStorage"
    if not check.options.gate(gate):
        check.add(
            (*opts_at, "backend"),
            "the embedded RocksDB GCS fault tolerance backend (GcsFaultToleranceOptions.Backend: "
            f"'rocksdb') requires the {gate} feature gate to be enabled; {gate_hint(gate)}",
        )
    if as_text(opts.get("redisAddress")):
        check.add(
            (*opts_at, "redisAddress"),
            "cannot set GcsFaultToleranceOptions.RedisAddress when backend is 'rocksdb'",
        )
    for key, go_name in (("redisUsername", "RedisUsername"), ("redisPassword", "RedisPassword")):
        if opts.get(key) is not None:
            check.add(
                (*opts_at, key),
                f"cannot set GcsFaultToleranceOptions.{go_name} when backend is 'rocksdb'",
            )
    if as_text(opts.get("externalStorageNamespace")):
        check.add(
            (*opts_at, "externalStorageNamespace"),
            "cannot set GcsFaultToleranceOptions.ExternalStorageNamespace when backend is "
            "'rocksdb'",
        )
    storage = as_dict(opts.get("storage"))
    if as_text(storage.get("claimName")) and (
        storage.get("size") is not None
        or storage.get("storageClassName") is not None
        or as_list(storage.get("accessModes"))
    ):
        check.add(
            (*opts_at, "storage", "claimName"),
            "GcsFaultToleranceOptions.Storage.ClaimName is mutually exclusive with size, "
            "storageClassName, and accessModes",
        )
    container = check.head_container
    for name in (_RAY_GCS_STORAGE, _RAY_GCS_STORAGE_PATH):
        for index, _ in _env(container, name):
            check.add(
                (*check.head_container_at, "env", index),
                f"cannot set `{_RAY_GCS_STORAGE}` or `{_RAY_GCS_STORAGE_PATH}` env var in head Pod "
                "when the embedded GCS FT backend is used - these are managed by KubeRay",
            )
    for index, mount in enumerate(as_list(container.get("volumeMounts"))):
        mount = as_dict(mount)
        if mount.get("mountPath") == _GCS_STORAGE_PATH or mount.get("name") == _GCS_STORAGE_VOLUME:
            check.add(
                (*check.head_container_at, "volumeMounts", index),
                f"cannot set a volume mount named {go_quote(_GCS_STORAGE_VOLUME)} or mounted at "
                f"{_GCS_STORAGE_PATH} in the head container when the embedded GCS FT backend is "
                "used - it is managed by KubeRay",
            )
    for index, volume in enumerate(as_list(check.head_pod.get("volumes"))):
        if as_dict(volume).get("name") == _GCS_STORAGE_VOLUME:
            check.add(
                (*check.head_pod_at, "volumes", index),
                f"cannot set a volume named {go_quote(_GCS_STORAGE_VOLUME)} in the head Pod when "
                "the embedded GCS FT backend is used - it is managed by KubeRay",
            )


def _check_autoscaler(check: _Check) -> None:
    """Rules 13-17: group suspension and the autoscaler's options."""
    gate = "RayJobDeletionPolicy"
    if not check.options.gate(gate):
        for at, group in check.groups:
            if group.get("suspend") is True:
                check.add(
                    (*at, "suspend"),
                    f"worker group {as_text(group.get('groupName'))} can be suspended only when "
                    f"the {gate} feature gate is enabled; {gate_hint(gate)}",
                )
    env_at = (*check.head_container_at, "env")
    if not check.autoscaling:
        found = _first_env(check.head_container, _AUTOSCALER_V2_ENV)
        if found is not None and as_text(found[1].get("value")) in _TRUE_VALUES:
            check.add(
                (*env_at, found[0]),
                f"environment variable {_AUTOSCALER_V2_ENV} cannot be set to "
                f"'{as_text(found[1].get('value'))}' when enableInTreeAutoscaling is false. Please "
                "set enableInTreeAutoscaling: true to use autoscaler v2",
            )
    else:
        for at, group in check.groups:
            if group.get("suspend") is True:
                check.add(
                    (*at, "suspend"),
                    f"worker group {as_text(group.get('groupName'))} cannot be suspended with "
                    "Autoscaler enabled",
                )
        if check.autoscaler_version is not None:
            for index, _ in _env(check.head_container, _AUTOSCALER_V2_ENV):
                check.add(
                    (*env_at, index),
                    f"both .spec.autoscalerOptions.version and head Pod env var "
                    f"{_AUTOSCALER_V2_ENV} are set, please only use the former",
                )
        if check.autoscaler_version == "v2":
            if check.head_pod.get("restartPolicy") not in (None, "", "Never"):
                check.add(
                    (*check.head_pod_at, "restartPolicy"),
                    "restartPolicy for head Pod should be Never or unset when using autoscaler V2",
                )
            for at, group in check.groups:
                pod = as_dict(as_dict(group.get("template")).get("spec"))
                if pod.get("restartPolicy") not in (None, "", "Never"):
                    check.add(
                        (*at, "template", "spec", "restartPolicy"),
                        f"restartPolicy for worker group {as_text(group.get('groupName'))} should "
                        "be Never or unset when using autoscaler V2",
                    )
    autoscaler = as_dict(check.spec.get("autoscalerOptions"))
    autoscaler_at = (*check.at, "autoscalerOptions")
    timeout = autoscaler.get("idleTimeoutSeconds")
    if timeout is not None and timeout < 0:
        check.add(
            (*autoscaler_at, "idleTimeoutSeconds"),
            f"autoscalerOptions.idleTimeoutSeconds must be non-negative, got {timeout}",
        )
    for index, _ in _env(autoscaler, _AUTOSCALER_CMD_ENV):
        check.add(
            (*autoscaler_at, "env", index),
            f"autoscalerOptions.env must not contain {_AUTOSCALER_CMD_ENV}: it is managed by "
            "KubeRay and injected automatically into the autoscaler container",
        )


def _check_history_server(check: _Check) -> None:
    """Rule 18: the history-server collector."""
    if check.spec.get("historyServerOptions") is None:
        return
    gate = "RayClusterHistoryServer"
    hso_at = (*check.at, "historyServerOptions")
    if not check.options.gate(gate):
        check.add(hso_at, f"{gate} feature gate is not enabled; {gate_hint(gate)}")
    collector = as_dict(check.spec["historyServerOptions"]).get("collectorOptions")
    if collector is None:
        check.add(hso_at, "historyServerOptions.collectorOptions must be set")
        return
    collector = as_dict(collector)
    collector_at = (*hso_at, "collectorOptions")
    if not as_text(collector.get("image")):
        check.add(
            (*collector_at, "image") if "image" in collector else collector_at,
            "historyServerOptions.collectorOptions.image must be set",
        )
    _check_collector_env(check, collector, (*collector_at, "env"))
    for index, container in enumerate(as_list(check.head_pod.get("containers"))):
        if as_dict(container).get("name") == _COLLECTOR_CONTAINER:
            check.add(
                (*check.head_pod_at, "containers", index, "name"),
                f"head pod template must not define a container with name "
                f"'{_COLLECTOR_CONTAINER}' when history server collector options are enabled",
            )
    for at, group in check.groups:
        pod = as_dict(as_dict(group.get("template")).get("spec"))
        for index, container in enumerate(as_list(pod.get("containers"))):
            if as_dict(container).get("name") == _COLLECTOR_CONTAINER:
                check.add(
                    (*at, "template", "spec", "containers", index, "name"),
                    f"worker group {as_text(group.get('groupName'))} pod template must not "
                    f"define a container with name '{_COLLECTOR_CONTAINER}' when history server "
                    "collector options are enabled",
                )


def _check_collector_env(check: _Check, collector: Manifest, env_at: JsonPath) -> None:
    # Go builds a name -> entry map, so the last entry of a repeated name wins.
    entries: dict[str, tuple[int, Manifest]] = {}
    for index, entry in enumerate(as_list(collector.get("env"))):
        entry = as_dict(entry)
        entries[as_text(entry.get("name"))] = (index, entry)
    for name in _COLLECTOR_MANAGED_ENV:
        if name in entries:
            check.add(
                (*env_at, entries[name][0]),
                f"historyServerOptions.collectorOptions.env must not contain {name}: it is "
                "managed by KubeRay and injected automatically into the collector container",
            )

    def has_value(name: str) -> bool:
        entry = entries.get(name, (0, {}))[1]
        return bool(as_text(entry.get("value"))) or entry.get("valueFrom") is not None

    def require(name: str, message: str) -> None:
        if not has_value(name):
            at = (*env_at, entries[name][0]) if name in entries else env_at
            check.add(at, message)

    backend_entry = entries.get("STORAGE_BACKEND")
    backend = as_text(backend_entry[1].get("value")) if backend_entry else ""
    if not backend:
        check.add(
            (*env_at, backend_entry[0]) if backend_entry else env_at,
            "STORAGE_BACKEND environment variable must be set with a literal string value in "
            "historyServerOptions.collectorOptions.env",
        )
        return
    kind = backend.upper()
    if kind == "GCS":
        require(
            "GCS_BUCKET", "GCS_BUCKET environment variable must be set when STORAGE_BACKEND is GCS"
        )
    elif kind == "S3":
        require(
            "S3_REGION", "S3_REGION environment variable must be set when STORAGE_BACKEND is S3"
        )
    elif kind == "AZUREBLOB":
        mode_entry = entries.get("AZURE_STORAGE_AUTH_MODE", (0, {}))[1]
        mode = as_text(mode_entry.get("value")).strip().lower()
        if mode == "connection_string":
            require(
                "AZURE_STORAGE_CONNECTION_STRING",
                "AZURE_STORAGE_CONNECTION_STRING environment variable must be set when "
                "STORAGE_BACKEND is AZUREBLOB and AZURE_STORAGE_AUTH_MODE is connection_string",
            )
        elif mode in ("workload_identity", "default"):
            require(
                "AZURE_STORAGE_ACCOUNT_URL",
                "AZURE_STORAGE_ACCOUNT_URL environment variable must be set when STORAGE_BACKEND "
                f"is AZUREBLOB and AZURE_STORAGE_AUTH_MODE is {mode}",
            )
        elif not has_value("AZURE_STORAGE_CONNECTION_STRING") and not has_value(
            "AZURE_STORAGE_ACCOUNT_URL"
        ):
            check.add(
                env_at,
                "either AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_URL environment "
                "variable must be set when STORAGE_BACKEND is AZUREBLOB",
            )
    elif kind == "ALIYUNOSS":
        for name in ("OSS_BUCKET", "OSS_ENDPOINT", "OSS_REGION"):
            require(
                name, f"{name} environment variable must be set when STORAGE_BACKEND is ALIYUNOSS"
            )


def _check_auth(check: _Check) -> None:
    """Rule 19, and the renderer's refusal of a randomly generated token Secret."""
    if check.spec.get("authOptions") is None:
        return
    auth = as_dict(check.spec.get("authOptions"))
    auth_at = (*check.at, "authOptions")
    version_at = (*check.at, "rayVersion")
    k8s_auth = auth.get("enableK8sTokenAuth") is True
    if auth.get("mode") == "token":
        version = as_text(check.spec.get("rayVersion"))
        error = versions.version_error(version) if version else None
        if not version:
            check.add(
                (*auth_at, "mode"),
                "authOptions.mode is 'token' but RayVersion was not specified. Ray version 2.52.0 "
                "or later is required; set spec.rayVersion",
            )
        elif error is not None:
            check.add(
                version_at,
                f"authOptions.mode is 'token' but RayVersion format is invalid: {version}, {error}",
            )
        elif not versions.at_least(version, "2.52.0"):
            check.add(
                version_at,
                f"authOptions.mode is 'token' but minimum Ray version is 2.52.0, got {version}",
            )
        elif k8s_auth:
            if not versions.at_least(version, "2.55.0"):
                check.add(
                    version_at,
                    "authOptions.enableK8sTokenAuth is enabled but minimum Ray version is 2.55.0, "
                    f"got {version}",
                )
            elif as_text(auth.get("secretName")):
                check.add(
                    (*auth_at, "secretName"),
                    "authOptions.enableK8sTokenAuth is enabled and authOptions.secretName is also "
                    "set; remove one of them",
                )
    elif k8s_auth:
        check.add(
            (*auth_at, "enableK8sTokenAuth"),
            "authOptions.enableK8sTokenAuth is enabled but authOptions.mode not set to 'token'",
        )
    # KubeRay creates a Secret with a random token whenever authOptions is set, mode is not
    # `disabled`, K8s token auth is off and no secretName is given (raycluster.md §1.5.2).
    if auth.get("mode") != "disabled" and not k8s_auth and not as_text(auth.get("secretName")):
        check.add(
            auth_at,
            "authOptions has no secretName: KubeRay would create a Secret with a random token, "
            "which cannot live in git; create a Secret with key auth_token and set "
            "authOptions.secretName",
        )


def _check_network_policy(check: _Check) -> None:
    """Rule 20: spec.networkPolicy."""
    if check.spec.get("networkPolicy") is None:
        return
    gate = "RayClusterNetworkPolicy"
    np_at = (*check.at, "networkPolicy")
    if not check.options.gate(gate):
        check.add(
            np_at,
            f"spec.networkPolicy requires the {gate} feature gate to be enabled; {gate_hint(gate)}",
        )
    policy = as_dict(check.spec["networkPolicy"])
    mode = as_text(policy.get("mode")) or "DenyAll"

    def check_rules(rules: Manifest, at: JsonPath, label: str) -> None:
        if mode == "DenyAllEgress" and as_list(rules.get("ingressRules")):
            check.add(
                (*at, "ingressRules"),
                f"{label}.ingressRules cannot be set when mode is {go_quote(mode)} "
                "(ingress is not restricted)",
            )
        if mode == "DenyAllIngress" and as_list(rules.get("egressRules")):
            check.add(
                (*at, "egressRules"),
                f"{label}.egressRules cannot be set when mode is {go_quote(mode)} "
                "(egress is not restricted)",
            )

    for role in ("head", "worker"):
        if policy.get(role) is not None:
            check_rules(as_dict(policy[role]), (*np_at, role), f"networkPolicy.{role}")
    # Every group's name counts, also of a group the schema refused (its other rules skip it).
    names = {
        as_text(group.get("groupName"))
        for group in as_list(check.spec.get("workerGroupSpecs"))
        if isinstance(group, document.Unchecked)
    }
    for at, group in check.groups:
        name = as_text(group.get("groupName"))
        names.add(name)
        errors = k8snames.dns1123_label_errors(name)
        if errors:
            check.add(
                (*at, "groupName"),
                f"worker group name {go_quote(name)} must be a valid DNS1123 label when "
                "networkPolicy is enabled (it is embedded in the NetworkPolicy name): "
                f"{go_list(errors)}",
            )
    for index, entry in enumerate(as_list(policy.get("workerGroups"))):
        entry = as_dict(entry)
        name = as_text(entry.get("groupName"))
        at = (*np_at, "workerGroups", index)
        check_rules(entry, at, f"networkPolicy.workerGroups[{go_quote(name)}]")
        if name not in names:
            check.add(
                (*at, "groupName"),
                f"networkPolicy.workerGroups[{go_quote(name)}] does not match any group name in "
                "workerGroupSpecs",
            )


def _check_tls(check: _Check) -> None:
    """Rule 21: spec.tlsOptions; its content is checked whenever `enabled` is true."""
    if check.spec.get("tlsOptions") is None:
        return
    gate = "RayClusterMTLS"
    if not check.options.gate(gate):
        check.add(
            (*check.at, "tlsOptions"),
            f"spec.tlsOptions requires the {gate} feature gate to be enabled; {gate_hint(gate)}",
        )
    if as_dict(check.spec["tlsOptions"]).get("enabled") is not True:
        return
    managed = "the operator manages TLS configuration automatically"
    containers: list[tuple[JsonPath, Manifest, str]] = []
    if as_list(check.head_pod.get("containers")):
        containers.append((check.head_container_at, check.head_container, "head Pod"))
    for at, group in check.groups:
        pod = as_dict(as_dict(group.get("template")).get("spec"))
        pod_containers = as_list(pod.get("containers"))
        if pod_containers:
            where = f"worker group {go_quote(as_text(group.get('groupName')))}"
            containers.append(
                (
                    (*at, "template", "spec", "containers", 0),
                    as_dict(pod_containers[0]),
                    where,
                )
            )
    for at, container, where in containers:
        for name in _TLS_ENV:
            for index, _ in _env(container, name):
                check.add(
                    (*at, "env", index),
                    f"cannot set {name} environment variable in {where} when tlsOptions is set - "
                    + managed,
                )
        _check_tls_mounts(check, container, (*at, "volumeMounts"), where)
    autoscaler = as_dict(check.spec.get("autoscalerOptions"))
    autoscaler_at = (*check.at, "autoscalerOptions")
    for name in _TLS_ENV:
        for index, _ in _env(autoscaler, name):
            check.add(
                (*autoscaler_at, "env", index),
                f"cannot set {name} environment variable in autoscalerOptions.env when tlsOptions "
                "is set - the operator manages TLS configuration for the autoscaler automatically",
            )
    _check_tls_mounts(
        check, autoscaler, (*autoscaler_at, "volumeMounts"), "autoscalerOptions.volumeMounts"
    )


def _check_tls_mounts(check: _Check, container: Manifest, at: JsonPath, where: str) -> None:
    managed = "the operator manages TLS configuration automatically"
    for index, mount in enumerate(as_list(container.get("volumeMounts"))):
        mount = as_dict(mount)
        if mount.get("name") == _TLS_VOLUME:
            check.add(
                (*at, index),
                f"cannot use volume mount named {go_quote(_TLS_VOLUME)} in {where} when "
                f"tlsOptions is set - {managed}",
            )
        elif mount.get("mountPath") == _TLS_PATH:
            check.add(
                (*at, index),
                f"cannot use volume mount at path {go_quote(_TLS_PATH)} in {where} when "
                f"tlsOptions is set - {managed}",
            )


def _check_upgrade_strategy(check: _Check) -> None:
    """§6.4: the RayCluster-level upgrade strategy."""
    strategy = as_dict(check.spec.get("upgradeStrategy"))
    if strategy.get("type") is None:
        return
    kind = strategy["type"]
    at = (*check.at, "upgradeStrategy", "type")
    if kind not in ("Recreate", "None"):
        check.add(
            at,
            f"Spec.UpgradeStrategy.Type value {kind} is invalid, valid options are Recreate or "
            "None",
        )
    if check.creator in ("RayJob", "RayService"):
        check.add(
            at,
            f"upgradeStrategy cannot be set when RayCluster is created by {check.creator}; "
            "remove upgradeStrategy from the cluster spec",
        )


def _check_autoscaler_v1_restart_policy(check: _Check) -> None:
    """§6.4: KubeRay only warns about worker restartPolicy under autoscaler v1."""
    if not check.autoscaling or check.autoscaler_version != "v1":
        return
    for at, group in check.groups:
        pod = as_dict(as_dict(group.get("template")).get("spec"))
        if pod.get("restartPolicy") not in (None, "", "Never"):
            check.add(
                (*at, "template", "spec", "restartPolicy"),
                f"restartPolicy for worker groups [{as_text(group.get('groupName'))}] should be "
                "Never or unset when using autoscaler V1",
                "warning",
            )


# `$NAME`, `${NAME}` (expanded by the shell that runs `ray start`) or `$(NAME)` (by the
# kubelet, in env values): a reference to a variable, not a password.
_ENV_REFERENCE: Final = re.compile(r"\$(?:[A-Za-z_]\w*|\{[A-Za-z_]\w*\}|\([A-Za-z_]\w*\))")


def _is_literal(value: object) -> bool:
    text = as_text(value)
    return bool(text) and _ENV_REFERENCE.fullmatch(text) is None


def _check_literal_credentials(check: _Check) -> None:
    """Beyond KubeRay (security review L7): a password written in the manifest is in git.

    Rendered as KubeRay does (into the head pod's env), so a warning, not an error.
    """
    secret_hint = (
        "it is stored in git and in the rendered Pods in plain text; use "
        "gcsFaultToleranceOptions.redisPassword.valueFrom.secretKeyRef instead"
    )
    ft = as_dict(check.spec.get("gcsFaultToleranceOptions"))
    password = as_dict(ft.get("redisPassword"))
    # (Under the rocksdb backend any redisPassword is already an error.)
    if _is_literal(password.get("value")) and as_text(ft.get("backend")) != "rocksdb":
        check.add(
            (*check.at, "gcsFaultToleranceOptions", "redisPassword", "value"),
            f"a literal Redis password: {secret_hint}",
            "warning",
        )
    # (With gcsFaultToleranceOptions the parameter is already an error, rule 8.)
    legacy = as_dict(check.head.get("rayStartParams")).get("redis-password")
    if check.spec.get("gcsFaultToleranceOptions") is None and _is_literal(legacy):
        check.add(
            (*check.at, "headGroupSpec", "rayStartParams", "redis-password"),
            f"a literal Redis password in rayStartParams: {secret_hint}",
            "warning",
        )


SERVE_PORT_MESSAGE: Final = (
    'the annotation ray.io/enable-serve-service is "true" but the head container declares no port '
    "named 'serve' (or with the prefix 'serve-', e.g. 'serve-grpc'); KubeRay would create neither "
    "the serve Service nor any Pod: add such a port to the head container"
)


def check_parsed_cluster(cluster: RayCluster) -> list[Problem]:
    """Problems KubeRay only finds while reconciling a parsed cluster (they block every Pod)."""
    problems: list[Problem] = []
    if cluster.wants_serve_service and not cluster.serve_ports:
        problems.append(
            Problem(
                ("metadata", "annotations", naming.ANN_ENABLE_SERVE_SERVICE), SERVE_PORT_MESSAGE
            )
        )
    return problems
