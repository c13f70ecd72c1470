"""The Argo CD Lua health scripts and the Flux CEL health checks, run for real.

Lua: Lua 5.1 from PyPI (`lupa`), the language version of Argo CD's gopher-lua, inside the
sandbox Argo CD gives a health script (base, table, package and a safe `os`; no `string`,
`math`, `io` or `debug`, and no string methods), with `obj` decoded the way Argo CD does
(objects and arrays as tables). The result must be Argo CD's contract: a table with a valid
`status` and a string `message`. CEL: `cel-python` evaluates the Flux expressions in
Flux's order (inProgress, failed, current; none true is in progress), with the object's
top-level fields as variables, as Flux's evaluator binds them.

The inputs are the objects the syncer writes, recorded from its own rigs
(tests/integrations/syncer_objects.py), plus a few hand-made objects kuberay did not make.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import celpy
import pytest
from lupa import lua51

from renderer import gitops, health
from syncer.rayjob import views
from tests.fakeapi.fixtures import KubeApi
from tests.integrations import syncer_objects
from tests.validation import validate_object

Manifest = dict[str, Any]

SANDBOX = """
getmetatable("").__index = nil
string, math, io, debug, coroutine, python = nil, nil, nil, nil, nil, nil
local time, date, clock = os.time, os.date, os.clock
os = {time = time, date = date, clock = clock}
"""


def lua_health(script_file: str, obj: Manifest) -> dict[str, str]:
    """Run one health script on `obj` the way Argo CD does; check and return its verdict."""
    lua = lua51.LuaRuntime(register_eval=False, register_builtins=False)
    lua.execute(SANDBOX)
    lua.globals().obj = lua.table_from(copy.deepcopy(obj), recursive=True)
    result = lua.execute(health.lua_script(script_file))
    assert lua51.lua_type(result) == "table", f"a health script must return a table: {result!r}"
    verdict = {str(k): v for k, v in result.items()}
    assert set(verdict) <= {"status", "message"}, verdict
    assert verdict.get("status") in health.ARGOCD_STATUSES, verdict
    assert isinstance(verdict.get("message", ""), str), verdict
    return {"status": str(verdict["status"]), "message": str(verdict.get("message", ""))}


def configmap(obj: Manifest) -> dict[str, str]:
    return lua_health("configmap.lua", obj)


def job(obj: Manifest) -> dict[str, str]:
    return lua_health("job.lua", obj)


def route(obj: Manifest) -> dict[str, str]:
    return lua_health("httproute.lua", obj)


# Flux's evaluation order and the kstatus verdict of each expression.
ORDER = {"inProgress": "InProgress", "failed": "Failed", "current": "Current"}


@functools.cache
def _programs() -> dict[str, Any]:
    env = celpy.Environment()
    exprs = health.FLUX_CONFIGMAP_EXPRS
    return {key: env.program(env.compile(exprs[key])) for key in ORDER}


def flux_status(obj: Manifest) -> str:
    """kstatus' verdict from the Flux expressions: InProgress, Failed or Current."""
    to_cel = celpy.json_to_cel  # type: ignore[attr-defined]
    activation = {key: to_cel(value) for key, value in obj.items()}
    for key, verdict in ORDER.items():
        result = _programs()[key].evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), f"{key} gave {result!r}"
        if result:
            return verdict
    return "InProgress"


# --- objects the syncer wrote --------------------------------------------------------------


@pytest.fixture
def succeeded(kube_api: KubeApi) -> tuple[syncer_objects.Seen, syncer_objects.Seen]:
    return syncer_objects.run_rayjob(kube_api, mode="K8sJobMode", backoff=0, outcomes=["SUCCEEDED"])


@pytest.fixture
def failed(kube_api: KubeApi) -> tuple[syncer_objects.Seen, syncer_objects.Seen]:
    return syncer_objects.run_rayjob(
        kube_api, mode="K8sJobMode", backoff=0, outcomes=["FAILED"], submitter_exit=0
    )


def test_a_rayjob_that_succeeds_is_progressing_then_healthy(succeeded: Any) -> None:
    statuses, jobs = succeeded
    assert "Complete" in statuses.states and "Running" in statuses.states
    for state, cm in statuses.states.items():
        verdict = configmap(cm)
        expected = "Healthy" if state == "Complete" else "Progressing"
        assert verdict["status"] == expected, (state, verdict)
        assert verdict["message"].startswith("RayJob demo: ")
        assert flux_status(cm) == ("InProgress" if state in ("", "Initializing") else "Current")
    # The gated submitter Job, before the syncer reported anything, is Progressing.
    gated = job(jobs.states["created"])
    assert gated["status"] == "Progressing"
    assert "gated" in gated["message"]
    # Running and Complete under a Job that ran and completed: the syncer leaves the Job's
    # own verdicts (it annotates only what they would get wrong), which say the same.
    assert job(jobs.states["final"])["status"] == "Healthy"
    for state, obj in jobs.states.items():
        if state not in ("Complete", "Failed", "final"):
            assert job(obj)["status"] == "Progressing", state


def test_a_rayjob_that_fails_is_degraded_and_fails_the_flux_health_check(failed: Any) -> None:
    statuses, jobs = failed
    cm = statuses.states["Failed"]
    assert configmap(cm) == {
        "status": "Degraded",
        "message": "RayJob demo: Failed (Ray job FAILED)",
    }
    assert flux_status(cm) == "Failed"
    # The submitter exited 0 (its Job is Complete, Healthy on its own): the annotation
    # is what makes it Degraded.
    assert job(jobs.states["final"]) == {
        "status": "Degraded",
        "message": "RayJob demo: Failed (Ray job FAILED)",
    }


def test_a_retried_submitter_is_progressing_although_its_job_failed(failed: Any) -> None:
    """The syncer's view wins over the Job's own conditions: a retry is not a failure."""
    _, jobs = failed
    submitter = copy.deepcopy(jobs.states["Failed"])
    submitter["metadata"]["annotations"]["status.kuberay.io/job-deployment-status"] = "Retrying"
    submitter.setdefault("status", {})["conditions"] = [
        {"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}
    ]
    assert job(submitter)["status"] == "Progressing"
    unreported = copy.deepcopy(submitter)
    del unreported["metadata"]["annotations"]
    degraded = {"status": "Degraded", "message": "RayJob demo: BackoffLimitExceeded"}
    assert job(unreported) == degraded


@pytest.fixture
def upgrade(kube_api: KubeApi) -> syncer_objects.ServiceStates:
    return syncer_objects.run_rayservice_upgrade(kube_api)


def test_a_rayservice_upgrade_is_progressing_until_promoted(
    upgrade: syncer_objects.ServiceStates,
) -> None:
    serving = {k: v for k, v in upgrade.statuses.states.items() if k.startswith("Running|")}
    assert any(k == "Running|" for k in serving) and any(k != "Running|" for k in serving)
    for state, cm in upgrade.statuses.states.items():
        expected = "Healthy" if state == "Running|" else "Progressing"
        assert configmap(cm)["status"] == expected, state
        assert flux_status(cm) == ("Current" if state.startswith("Running|") else "InProgress")
    for state, intent in upgrade.intents.states.items():
        expected = "Healthy" if state == "Running|" else "Progressing"
        assert configmap(intent)["status"] == expected, state
        assert flux_status(intent) == "Current"  # not a status ConfigMap
    split = [r for k, r in upgrade.routes.states.items() if k.count("=") > 1]
    single = [
        r for k, r in upgrade.routes.states.items() if k.count("=") == 1 and k.endswith("True")
    ]
    assert single and any((obj.get("status") or {}).get("parents") for obj in split)
    for obj in split:
        verdict = route(obj)
        if (obj.get("status") or {}).get("parents"):
            assert verdict["status"] == "Progressing"
            assert "upgrade in progress" in verdict["message"]
    assert all(route(obj)["status"] == "Healthy" for obj in single)
    paused = copy.deepcopy(single[0])
    paused["metadata"].setdefault("annotations", {})["kuberay.io/upgrade-paused"] = "true"
    assert route(paused)["status"] == "Suspended"


# --- objects kuberay did not make keep Argo CD's built-in verdicts ---------------------------


def test_a_rayclusters_status_is_progressing_healthy_then_degraded(kube_api: KubeApi) -> None:
    seen = syncer_objects.run_raycluster(kube_api)
    verdicts = {label: configmap(cm) for label, cm in seen.states.items()}
    name = "RayCluster raycluster-demo: "
    assert verdicts == {
        "provisioning": {
            "status": "Progressing",
            "message": name + "provisioning; 0/2 workers available",
        },
        "ready": {"status": "Healthy", "message": name + "ready; 2/2 workers available"},
        "worker-lost": {
            "status": "Progressing",
            "message": name + "recovering; 1/2 workers available",
        },
        "head-not-ready": {
            "status": "Degraded",
            "message": name + "head Pod not ready; 1/2 workers available",
        },
    }
    replica_failure = copy.deepcopy(seen.states["ready"])
    replica_failure["data"]["replicaFailure"] = "True"
    assert configmap(replica_failure)["status"] == "Degraded"
    suspended = copy.deepcopy(seen.states["ready"])
    suspended["data"]["state"] = "suspended"
    assert configmap(suspended)["status"] == "Suspended"


def test_other_configmaps_are_healthy() -> None:
    plain: Manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    plain["data"] = {}
    assert configmap(plain)["status"] == "Healthy"
    assert configmap({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})["status"] == (
        "Healthy"
    )
    assert flux_status(plain) == "Current"
    # A status-looking ConfigMap someone else wrote is not the syncer's.
    forged = copy.deepcopy(plain)
    forged["metadata"]["labels"] = {"kuberay.io/role": "status", "kuberay.io/origin-kind": "RayJob"}
    forged["data"] = {"jobDeploymentStatus": "Failed"}
    assert configmap(forged)["status"] == "Healthy"
    # Flux checks only the status ConfigMaps listed by name in healthChecks: it reads labels.
    assert flux_status(forged) == "Failed"


def test_other_jobs_get_the_built_in_verdicts() -> None:
    def plain(*conditions: Manifest, suspend: bool = False) -> Manifest:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "x"},
            "spec": {"suspend": suspend, "template": {"spec": {"containers": []}}},
            "status": {"conditions": list(conditions)},
        }

    assert job(plain())["status"] == "Progressing"
    assert job(plain({"type": "Complete", "status": "True"}))["status"] == "Healthy"
    assert job(plain({"type": "Failed", "status": "True", "message": "boom"})) == {
        "status": "Degraded",
        "message": "boom",
    }
    assert job(plain(suspend=True))["status"] == "Suspended"


def test_the_syncer_reads_a_submitter_jobs_own_verdict_as_the_lua_script_gives_it() -> None:
    """`views.job_health` decides when the syncer may leave a submitter Job unannotated;
    it must give, for every mix of conditions, the verdict job.lua gives that Job."""
    submitter = copy.deepcopy(syncer_objects.rendered_submitter())
    kinds = ("Complete", "Failed", "Suspended", "SuccessCriteriaMet", "FailureTarget")
    for mask in range(2 ** len(kinds) * 2):
        obj = copy.deepcopy(submitter)
        obj["spec"]["suspend"] = bool(mask & 1)
        obj["status"] = {
            "conditions": [
                {"type": kind, "status": "True" if mask >> (i + 1) & 1 else "False"}
                for i, kind in enumerate(kinds)
            ]
        }
        expected = job(obj)["status"]
        assert views.job_health(obj) == expected, obj["status"]
        assert views.job_health(views.cached_job(obj)) == expected, obj["status"]


def test_other_routes_get_the_built_in_verdicts() -> None:
    def plain(*conditions: Manifest) -> Manifest:
        parents = [{"parentRef": {"name": "gw"}, "conditions": list(conditions)}]
        return {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "x", "generation": 2},
            "spec": {"rules": [{"backendRefs": [{"name": "a"}, {"name": "b"}]}]},
            "status": {"parents": parents if conditions else []},
        }

    accepted = {"type": "Accepted", "status": "True", "observedGeneration": 2}
    assert route(plain())["status"] == "Progressing"
    assert route(plain(accepted))["status"] == "Healthy"  # two backends, but not kuberay's
    refused = {"type": "Accepted", "status": "False", "message": "no listener"}
    assert route(plain(refused)) == {"status": "Degraded", "message": "Parent gw: no listener"}
    stale = {**accepted, "observedGeneration": 1}
    assert route(plain(stale))["status"] == "Progressing"


# --- what `--gitops-config` emits ------------------------------------------------------------


def test_argocd_config_carries_the_scripts_under_argo_cd_keys() -> None:
    application, patch = gitops.argocd_objects([])
    assert application["kind"] == "Application"
    assert validate_object(application) == []
    assert validate_object(patch) == []
    assert patch["metadata"]["name"] == "argocd-cm"
    assert sorted(patch["data"]) == [
        "resource.customizations.health.ConfigMap",
        "resource.customizations.health.batch_Job",
        "resource.customizations.health.gateway.networking.k8s.io_HTTPRoute",
    ]
    assert patch["data"]["resource.customizations.health.batch_Job"] == health.lua_script("job.lua")


def test_flux_kustomization_checks_the_status_configmaps(failed: Any) -> None:
    statuses, _ = failed
    cm = statuses.states["Failed"]
    intent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "demo-kuberay-intent",
            "namespace": cm["metadata"]["namespace"],
            "labels": {
                "kuberay.io/role": "intent",
                "kuberay.io/origin-kind": "RayJob",
                "kuberay.io/origin-name": "demo",
            },
        },
    }
    kustomization = gitops.flux_fragment([intent])
    assert validate_object(kustomization) == []
    assert kustomization["spec"]["healthChecks"] == [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": cm["metadata"]["name"],
            "namespace": cm["metadata"]["namespace"],
        }
    ]
    assert kustomization["spec"]["healthCheckExprs"] == [health.FLUX_CONFIGMAP_EXPRS]
