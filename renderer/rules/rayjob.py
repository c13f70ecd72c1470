"""KubeRay's semantic rules for a RayJob, plus the renderer's own refusals.

Mirrors `ValidateRayJobMetadata` and `ValidateRayJobSpec` (reference rayjob.md §1.3-§1.4) in
KubeRay's order and hands the embedded `rayClusterSpec` to the RayCluster rules, but reports
every problem at the offending field instead of stopping at the first. The status rule is
dynamic and belongs to the syncer. `check_plan`, `check_dashboard_port` and `check_wrapped`
are the renderer's refusals on the parsed job and its built cluster. Pure: `Problem`s out.
"""

from __future__ import annotations

import re
from typing import Final

from renderer import naming, yamltext
from renderer.errors import JsonPath, Problem, show
from renderer.goformat import GoJsonError
from renderer.manifest import Manifest
from renderer.model.rayjob import (
    CLUSTER_SELECTOR_KEY,
    K8S_JOB_MODE,
    MODES,
    SIDECAR_MODE,
    RayJobPlan,
    group_templates,
    runtime_env_json,
)
from renderer.options import RenderOptions
from renderer.rules import document, raycluster
from renderer.rules.document import as_dict, as_list, as_text
from renderer.rules.versions import parse_ray_version

MAX_RAYJOB_NAME: Final = raycluster.MAX_RAYCLUSTER_NAME - 6  # room for `-xxxxx`
_DELETION_ORDER: Final = ("DeleteWorkers", "DeleteCluster", "DeleteSelf")
_SPEC: Final[JsonPath] = ("spec",)
_STRATEGY: Final[JsonPath] = ("spec", "deletionStrategy")


def check_rayjob(doc: Manifest, options: RenderOptions) -> list[Problem]:
    """Check a RayJob that already passed the JSON Schema (CRD defaults not applied)."""
    spec = as_dict(doc.get("spec"))
    managed = document.check_managed_by(spec, (*_SPEC, "managedBy"), "RayJob")
    if managed is not None:
        return [managed]
    problems = document.check_object_name(doc, "RayJob", MAX_RAYJOB_NAME)

    def add(path: JsonPath, message: str) -> None:
        problems.append(Problem(path, message))

    shutdown = spec.get("shutdownAfterJobFinishes") is True
    suspend = spec.get("suspend") is True
    selector = as_dict(spec.get("clusterSelector"))
    cluster_spec = spec.get("rayClusterSpec")
    mode = spec.get("submissionMode", K8S_JOB_MODE)
    backoff = spec.get("backoffLimit", 0)

    if suspend and not shutdown:
        add(
            (*_SPEC, "suspend"),
            "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended; "
            "set shutdownAfterJobFinishes: true",
        )
    if spec.get("ttlSecondsAfterFinished", 0) < 0:
        add(
            (*_SPEC, "ttlSecondsAfterFinished"),
            "TTLSecondsAfterFinished must be a non-negative integer",
        )
    problems.extend(_check_deletion(spec, options))
    if suspend and selector:
        add((*_SPEC, "suspend"), "the ClusterSelector mode doesn't support the suspend operation")
    if cluster_spec is None and not selector:
        add(_SPEC, "one of RayClusterSpec or ClusterSelector must be set; add spec.rayClusterSpec")
    if selector:
        if not as_text(selector.get(CLUSTER_SELECTOR_KEY)):
            add(
                (*_SPEC, "clusterSelector", CLUSTER_SELECTOR_KEY)
                if CLUSTER_SELECTOR_KEY in selector
                else (*_SPEC, "clusterSelector"),
                "cluster name in ClusterSelector should not be empty; set "
                f'clusterSelector["{CLUSTER_SELECTOR_KEY}"] to the name of the RayCluster',
            )
        if mode == SIDECAR_MODE:
            add((*_SPEC, "submissionMode"), "ClusterSelector is not supported in SidecarMode")
        if backoff > 0:
            add(
                (*_SPEC, "backoffLimit"),
                "BackoffLimit is incompatible with ClusterSelector mode; remove backoffLimit",
            )
    if mode == "InteractiveMode" and backoff > 0:
        add(
            (*_SPEC, "backoffLimit"),
            "BackoffLimit is incompatible with InteractiveMode; remove backoffLimit",
        )
    if mode == SIDECAR_MODE:
        for key in ("submitterPodTemplate", "submitterConfig"):
            if spec.get(key) is not None:
                add(
                    (*_SPEC, key),
                    f"currently, SidecarMode doesn't support {key[0].upper()}{key[1:]}; "
                    f"remove {key}",
                )
        head_pod = as_dict(
            as_dict(as_dict(as_dict(cluster_spec).get("headGroupSpec")).get("template")).get("spec")
        )
        if head_pod.get("restartPolicy") not in (None, "", "Never"):
            add(
                (*_SPEC, "rayClusterSpec", "headGroupSpec", "template", "spec", "restartPolicy"),
                "restartPolicy for head Pod should be Never or unset when using SidecarMode",
            )
    if cluster_spec is not None:
        auth = as_dict(as_dict(cluster_spec).get("authOptions"))
        if auth.get("enableK8sTokenAuth") is True:
            add(
                (*_SPEC, "rayClusterSpec", "authOptions", "enableK8sTokenAuth"),
                "K8s token auth mode is currently not supported for RayJob; remove "
                "enableK8sTokenAuth",
            )
        problems.extend(
            raycluster.check_raycluster(
                {"metadata": doc.get("metadata"), "spec": cluster_spec},
                options,
                creator="RayJob",
                base=(*_SPEC, "rayClusterSpec"),
            )
        )
    runtime_env = _runtime_env_error(as_text(spec.get("runtimeEnvYAML")))
    if runtime_env is not None:
        add((*_SPEC, "runtimeEnvYAML"), runtime_env)
    for key in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        value = spec.get(key)
        if value is not None and value <= 0:
            add((*_SPEC, key), f"{key} must be a positive integer, got {value}")
    if backoff < 0:
        add((*_SPEC, "backoffLimit"), f"backoffLimit must be a positive integer, got {backoff}")
    return problems


def _runtime_env_error(text: str) -> str | None:
    """KubeRay decodes runtimeEnvYAML into a map; empty and `null` are fine."""
    if not text:
        return None
    try:
        loaded = yamltext.load(text)
    except yamltext.YAMLError as exc:
        reason = yamltext.reason(exc)
    else:
        if loaded is None or isinstance(loaded, dict):
            return None
        reason = f"expected a mapping, got {type(loaded).__name__}"
    return (
        f"failed to unmarshal RuntimeEnvYAML: {show(text)}: {reason}; "
        "runtimeEnvYAML must be a YAML mapping"
    )


def _check_deletion(spec: Manifest, options: RenderOptions) -> list[Problem]:
    """Rule 3: TTL, shutdown and deletionStrategy together."""
    problems: list[Problem] = []
    shutdown = spec.get("shutdownAfterJobFinishes") is True
    if not shutdown and spec.get("ttlSecondsAfterFinished", 0) > 0:
        problems.append(
            Problem(
                (*_SPEC, "ttlSecondsAfterFinished"),
                "a RayJob with shutdownAfterJobFinishes set to false cannot have "
                "TTLSecondsAfterFinished; set shutdownAfterJobFinishes: true or remove "
                "ttlSecondsAfterFinished",
            )
        )
    if spec.get("deletionStrategy") is None:
        return problems
    strategy = as_dict(spec["deletionStrategy"])
    gate = "RayJobDeletionPolicy"
    if not options.gate(gate):
        problems.append(
            Problem(
                _STRATEGY,
                f"{gate} feature gate must be enabled to use DeletionStrategy; "
                f"{document.gate_hint(gate)}",
            )
        )
    legacy = strategy.get("onSuccess") is not None or strategy.get("onFailure") is not None
    rules = as_list(strategy.get("deletionRules"))
    if rules and shutdown:
        problems.append(
            Problem(
                (*_SPEC, "shutdownAfterJobFinishes"),
                "spec.shutdownAfterJobFinishes and spec.deletionStrategy.deletionRules are "
                "mutually exclusive; remove shutdownAfterJobFinishes",
            )
        )
    if rules and legacy:
        problems.append(
            Problem(
                _STRATEGY,
                "cannot use both legacy onSuccess/onFailure fields and deletionRules "
                "simultaneously; keep only deletionRules",
            )
        )
    elif legacy:
        problems.extend(_check_legacy(spec, strategy))
    elif rules:
        problems.extend(_check_rules(spec, rules))
    else:
        problems.append(
            Problem(
                _STRATEGY,
                "DeletionStrategy requires either BOTH onSuccess and onFailure, OR the "
                "deletionRules field (cannot be empty)",
            )
        )
    return problems


def _autoscaling(spec: Manifest) -> bool:
    return as_dict(spec.get("rayClusterSpec")).get("enableInTreeAutoscaling") is True


def _check_legacy(spec: Manifest, strategy: Manifest) -> list[Problem]:
    """Rule 3.6: the deprecated onSuccess / onFailure policies."""
    if strategy.get("onSuccess") is None or strategy.get("onFailure") is None:
        return [
            Problem(
                _STRATEGY,
                "both DeletionStrategy.OnSuccess and DeletionStrategy.OnFailure must be set when "
                "using the legacy deletion policy fields of DeletionStrategy",
            )
        ]
    problems: list[Problem] = []
    policies: list[tuple[JsonPath, str, str]] = []
    for key, outcome in (("onSuccess", "success"), ("onFailure", "failure")):
        policy = as_dict(strategy[key]).get("policy")
        if policy is None:
            problems.append(
                Problem(
                    (*_STRATEGY, key),
                    f"the DeletionPolicyType field of DeletionStrategy.{key[0].upper()}{key[1:]} "
                    f"cannot be unset when DeletionStrategy is enabled; set {key}.policy",
                )
            )
        else:
            policies.append(((*_STRATEGY, key, "policy"), policy, outcome))
    if problems:
        return problems
    if as_dict(spec.get("clusterSelector")):
        for at, policy, outcome in policies:
            if policy in ("DeleteCluster", "DeleteWorkers"):
                problems.append(
                    Problem(
                        at,
                        "the ClusterSelector mode doesn't support "
                        f"DeletionStrategy={policy} on {outcome}",
                    )
                )
    if _autoscaling(spec):
        for at, policy, _ in policies:
            if policy == "DeleteWorkers":
                problems.append(
                    Problem(
                        at,
                        "DeletionStrategy=DeleteWorkers currently does not support RayCluster "
                        "with autoscaling enabled",
                    )
                )
    if spec.get("shutdownAfterJobFinishes") is True:
        for at, policy, _ in policies:
            if policy == "DeleteNone":
                # KubeRay's text spells it "shutdownAfterJobFinshes"; we fix the typo.
                problems.append(
                    Problem(
                        at,
                        "shutdownAfterJobFinishes is set to 'true' while deletion policy is "
                        "'DeleteNone'; choose another policy or remove shutdownAfterJobFinishes",
                    )
                )
    return problems


def _check_rules(spec: Manifest, rules: list[object]) -> list[Problem]:
    """Rule 3.7: deletionRules, each rule and then TTL order per condition."""
    problems: list[Problem] = []
    selector_mode = bool(as_dict(spec.get("clusterSelector")))
    autoscaling = _autoscaling(spec)
    # (condition kind, condition value) -> policy -> (ttlSeconds, rule index)
    groups: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
    for index, raw in enumerate(rules):
        rule = as_dict(raw)
        at = (*_STRATEGY, "deletionRules", index)
        condition = as_dict(rule.get("condition"))
        job_status = condition.get("jobStatus")
        deployment_status = condition.get("jobDeploymentStatus")
        ttl = condition.get("ttlSeconds", 0)
        policy = as_text(rule.get("policy"))
        message = None
        where = at
        if job_status is not None and deployment_status is not None:
            message = "cannot set both JobStatus and JobDeploymentStatus at the same time"
            where = (*at, "condition")
        elif job_status is None and deployment_status is None:
            message = "exactly one of JobStatus and JobDeploymentStatus must be set"
            where = (*at, "condition")
        elif ttl < 0:
            message = "TTLSeconds must be non-negative"
            where = (*at, "condition", "ttlSeconds")
        elif selector_mode and policy in ("DeleteCluster", "DeleteWorkers"):
            message = f"DeletionPolicyType '{policy}' not supported when ClusterSelector is set"
            where = (*at, "policy")
        elif autoscaling and policy == "DeleteWorkers":
            message = "DeletionPolicyType 'DeleteWorkers' not supported with autoscaling enabled"
            where = (*at, "policy")
        if message is not None:
            problems.append(Problem(where, f"deletionRules[{index}]: {message}"))
            continue
        key = (
            ("JobStatus", as_text(job_status))
            if job_status is not None
            else ("JobDeploymentStatus", as_text(deployment_status))
        )
        group = groups.setdefault(key, {})
        if policy in group:
            problems.append(
                Problem(
                    at,
                    f"deletionRules[{index}]: duplicate rule for DeletionPolicyType '{policy}' and "
                    f"{key[0]} '{key[1]}'",
                )
            )
            continue
        group[policy] = (ttl, index)
    # KubeRay walks Go maps here (random order); we go JobStatus first, then by first use.
    for (kind, value), group in sorted(groups.items(), key=lambda item: item[0][0] != "JobStatus"):
        previous: tuple[str, int] | None = None
        for policy in _DELETION_ORDER:
            if policy not in group:
                continue
            ttl, index = group[policy]
            if previous is not None and ttl < previous[1]:
                problems.append(
                    Problem(
                        (*_STRATEGY, "deletionRules", index, "condition", "ttlSeconds"),
                        f"for {kind} '{value}': {policy} TTL ({ttl}) must be >= {previous[0]} "
                        f"TTL ({previous[1]})",
                    )
                )
            previous = (policy, ttl)
    return problems


# --- checks of the parsed job (the builder's own refusals) ----------------------------------

# Masterminds/semver NewVersion, which KubeRay uses for the `--metadata-json` version check.
_SEMVER: Final = re.compile(
    r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?"
    r"(?:-([0-9A-Za-z\-]+(?:\.[0-9A-Za-z\-]+)*))?(?:\+([0-9A-Za-z\-]+(?:\.[0-9A-Za-z\-]+)*))?"
)


def check_plan(plan: RayJobPlan, options: RenderOptions) -> list[Problem]:
    """Checks that need the derived names: modes, metadata, runtime env, submitter, podinfo."""
    problems: list[Problem] = []
    spec = plan.spec
    if plan.mode not in MODES:
        problems.append(
            Problem(
                ("spec", "submissionMode"),
                f"unknown submissionMode {plan.mode!r}: KubeRay never submits such a job; use "
                f"one of {', '.join(MODES)}",
                "warning",
            )
        )
    submits = plan.mode in (K8S_JOB_MODE, SIDECAR_MODE) and not plan.suspended
    if submits and spec.get("metadata"):
        error = _metadata_version_error(plan)
        if error is not None:
            problems.append(Problem(("spec", "metadata"), error))
    try:
        runtime_env_json(spec)
    except (GoJsonError, yamltext.YAMLError) as exc:
        problems.append(
            Problem(
                ("spec", "runtimeEnvYAML"),
                f"runtimeEnvYAML cannot be converted to JSON: {str(exc).splitlines()[0]}; "
                "write a YAML mapping of plain values with finite numbers",
            )
        )
    if plan.mode == K8S_JOB_MODE and not plan.suspended:
        problems.extend(_check_submitter_template(plan, options))
    if plan.mode == SIDECAR_MODE and options.gate("SidecarSubmitterRestart"):
        version = parse_ray_version(options.kubernetes_version)
        if version is not None and version < (1, 35, 0):
            problems.append(
                Problem(
                    ("spec", "submissionMode"),
                    "the SidecarSubmitterRestart feature gate needs Kubernetes 1.35 or newer "
                    "(per-container restartPolicy), but the target is "
                    f"{options.kubernetes_version}; raise the Kubernetes version or turn the "
                    "gate off",
                )
            )
    if spec.get("rayClusterSpec") is not None and plan.selector_cluster is None:
        problems.extend(_check_podinfo(spec["rayClusterSpec"]))
    return problems


def _check_submitter_template(plan: RayJobPlan, options: RenderOptions) -> list[Problem]:
    spec = plan.spec
    template = spec.get("submitterPodTemplate")
    at: JsonPath = ("spec", "submitterPodTemplate")
    if template is None:
        selected = plan.selector_cluster
        if selected is not None and (plan.namespace, selected) not in options.input_head_images:
            return [
                Problem(
                    ("spec", "clusterSelector"),
                    "a K8sJobMode RayJob with clusterSelector needs spec.submitterPodTemplate: "
                    "KubeRay takes the submitter image from the live RayCluster "
                    f"{selected!r}, which kuberay render cannot read; set "
                    "submitterPodTemplate (with the image), render that RayCluster in the same "
                    "run, or use submissionMode HTTPMode",
                )
            ]
        return []
    pod = template.get("spec") or {}
    problems: list[Problem] = []
    if not pod.get("containers"):
        problems.append(Problem((*at, "spec"), "submitterPodTemplate needs at least one container"))
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        problems.append(
            Problem(
                (*at, "spec", "restartPolicy") if "restartPolicy" in pod else (*at, "spec"),
                "a Job's Pod template needs restartPolicy Never or OnFailure and KubeRay copies "
                "submitterPodTemplate as is; set restartPolicy: Never",
            )
        )
    return problems


def _check_podinfo(cluster_spec: Manifest) -> list[Problem]:
    """The downward API volume must not clash with the user's volumes or mounts."""
    problems: list[Problem] = []
    for at, group in group_templates(cluster_spec):
        pod = (group.get("template") or {}).get("spec") or {}
        for i, volume in enumerate(pod.get("volumes") or []):
            if volume.get("name") == naming.PODINFO_VOLUME:
                problems.append(
                    Problem(
                        (*at, "template", "spec", "volumes", i, "name"),
                        f"the volume name {naming.PODINFO_VOLUME} is reserved by kuberay render "
                        "for the RayJob shutdown wrapper; rename the volume",
                    )
                )
        containers = pod.get("containers") or []
        for i, mount in enumerate((containers[0] if containers else {}).get("volumeMounts") or []):
            if mount.get("mountPath") == naming.PODINFO_DIR:
                problems.append(
                    Problem(
                        (*at, "template", "spec", "containers", 0, "volumeMounts", i, "mountPath"),
                        f"the path {naming.PODINFO_DIR} is reserved by kuberay render for the "
                        "RayJob shutdown wrapper; mount the volume elsewhere",
                    )
                )
    return problems


def _metadata_version_error(plan: RayJobPlan) -> str | None:
    """KubeRay refuses `--metadata-json` for an explicit rayVersion below 2.6.0."""
    cluster_spec = plan.spec.get("rayClusterSpec")
    if cluster_spec is None:
        return None
    version = str(cluster_spec.get("rayVersion") or "")
    if not version:
        return None
    match = _SEMVER.fullmatch(version)
    if match is None:
        return (
            f"failed to parse Ray version: {version}: Invalid Semantic Version; KubeRay cannot "
            "pass metadata to `ray job submit` and the RayJob stays Initializing: fix "
            "rayClusterSpec.rayVersion"
        )
    numbers = tuple(int(g) if g else 0 for g in match.groups()[:3])
    prerelease = match.group(4)
    if numbers < (2, 6, 0) or prerelease is not None:
        return (
            "the Ray version must be at least 2.6.0 to use the metadata field (got "
            f"{version}); KubeRay never submits the job: raise rayClusterSpec.rayVersion or "
            "remove spec.metadata"
        )
    return None


_HEAD_PORTS_AT: Final[JsonPath] = (
    "spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "containers", 0, "ports"
)  # fmt: skip
DASHBOARD_PORT_MESSAGE: Final = (
    "the head container has ports but none named 'dashboard': KubeRay cannot find the "
    "dashboard URL and the RayJob never leaves Initializing; name the dashboard port "
    "'dashboard'"
)


def check_dashboard_port(port: int | None) -> list[Problem]:
    """The rendered head Service must have a port named `dashboard` for the job's URL."""
    return [] if port is not None else [Problem(_HEAD_PORTS_AT, DASHBOARD_PORT_MESSAGE)]


def check_wrapped(cluster_spec: Manifest, objects: list[Manifest]) -> list[Problem]:
    """Warn once per group whose command the wrapper cannot reach (the user runs `ray start`)."""
    unwrapped: set[str] = set()
    for obj in objects:
        if obj.get("kind") != "Pod":
            continue
        args = obj["spec"]["containers"][0].get("args") or []
        if not any(naming.SHUTDOWN_REQUESTED in str(arg) for arg in args):
            unwrapped.add(str(obj["metadata"]["labels"].get(naming.RAY_GROUP)))
    problems = []
    for at, group in group_templates(cluster_spec):
        name = naming.HEAD_GROUP if at[-1] == "headGroupSpec" else str(group.get("groupName"))
        if name in unwrapped:
            problems.append(
                Problem(
                    (*at, "template", "spec", "containers", 0),
                    "this Ray container runs its own `ray start` (or the RayJob sets "
                    "ray.io/overwrite-container-cmd), so kuberay render cannot wrap it: the "
                    f"syncer's {naming.SHUTDOWN_REQUESTED} annotation will not stop its Pods",
                    "warning",
                )
            )
    return problems
