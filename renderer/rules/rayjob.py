"""KubeRay's semantic rules for a RayJob, plus the renderer's own refusals.

Mirrors `ValidateRayJobMetadata` and `ValidateRayJobSpec` (reference rayjob.md §1.3-§1.4) in
KubeRay's order and hands the embedded `rayClusterSpec` to the RayCluster rules, but reports
every problem at the offending field instead of stopping at the first. The status rule is
dynamic and belongs to the syncer. Pure: documents in, `Problem`s out.
"""

from __future__ import annotations

from typing import Any, Final

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from renderer.errors import JsonPath, Problem, show
from renderer.options import RenderOptions
from renderer.rules import raycluster
from renderer.rules.raycluster import as_dict, as_list, as_text

Manifest = dict[str, Any]

MAX_RAYJOB_NAME: Final = raycluster.MAX_RAYCLUSTER_NAME - 6  # room for `-xxxxx`
_CLUSTER_SELECTOR_KEY: Final = "ray.io/cluster"
_DELETION_ORDER: Final = ("DeleteWorkers", "DeleteCluster", "DeleteSelf")
_SPEC: Final[JsonPath] = ("spec",)
_STRATEGY: Final[JsonPath] = ("spec", "deletionStrategy")


def check_rayjob(doc: Manifest, options: RenderOptions) -> list[Problem]:
    """Check a RayJob that already passed the JSON Schema (CRD defaults not applied)."""
    spec = as_dict(doc.get("spec"))
    managed = raycluster.check_managed_by(spec, (*_SPEC, "managedBy"), "RayJob")
    if managed is not None:
        return [managed]
    problems = raycluster.check_object_name(doc, "RayJob", MAX_RAYJOB_NAME)

    def add(path: JsonPath, message: str) -> None:
        problems.append(Problem(path, message))

    shutdown = spec.get("shutdownAfterJobFinishes") is True
    suspend = spec.get("suspend") is True
    selector = as_dict(spec.get("clusterSelector"))
    cluster_spec = spec.get("rayClusterSpec")
    mode = spec.get("submissionMode", "K8sJobMode")
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
        if not as_text(selector.get(_CLUSTER_SELECTOR_KEY)):
            add(
                (*_SPEC, "clusterSelector", _CLUSTER_SELECTOR_KEY)
                if _CLUSTER_SELECTOR_KEY in selector
                else (*_SPEC, "clusterSelector"),
                "cluster name in ClusterSelector should not be empty; set "
                f'clusterSelector["{_CLUSTER_SELECTOR_KEY}"] to the name of the RayCluster',
            )
        if mode == "SidecarMode":
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
    if mode == "SidecarMode":
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
    loader = YAML(typ="safe", pure=True)
    loader.allow_duplicate_keys = True  # Go's non-strict decoder keeps the last value
    try:
        loaded = loader.load(text)
    except YAMLError as exc:
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
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
                f"{raycluster.gate_hint(gate)}",
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
