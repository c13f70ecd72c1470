"""Every render option of `kuberay render` is a KRM `functionConfig` key and an Argo CD
plugin parameter (or is named as not applying there, with the reason), and each one
reaches the same `RenderOptions` through all three entry points."""

from __future__ import annotations

import json
from typing import Any

import click
import pytest

from renderer import argocd_cmp, cli, krm, settings
from renderer.options import RenderOptions

LABELS = {"app.kubernetes.io/name": "ray-syncer", "tier": "control"}
# A value other than the default for each setting, written three ways: `kuberay render`
# arguments, a typed functionConfig `spec` (None: not a KRM key), Argo CD's environment.
SAMPLES: dict[str, tuple[list[str], dict[str, Any] | None, dict[str, str]]] = {
    "namespace": (["-n", "team"], {"namespace": "team"}, {"PARAM_NAMESPACE": "team"}),
    "cluster_domain": (
        ["--cluster-domain", "corp.local"],
        {"clusterDomain": "corp.local"},
        {"PARAM_CLUSTER_DOMAIN": "corp.local"},
    ),
    "feature_gates": (
        ["--feature-gates", "RayClusterNetworkPolicy=true,RayJobDeletionPolicy=false"],
        {"featureGates": {"RayClusterNetworkPolicy": True, "RayJobDeletionPolicy": False}},
        {"PARAM_FEATURE_GATES": "RayClusterNetworkPolicy=true,RayJobDeletionPolicy=false"},
    ),
    "kubernetes_version": (
        ["--kubernetes-version", "1.32"],
        {"kubernetesVersion": "1.32"},
        {"PARAM_KUBERNETES_VERSION": "1.32"},
    ),
    "init_container_injection": (
        ["--no-init-container-injection"],
        {"initContainerInjection": False},
        {"PARAM_INIT_CONTAINER_INJECTION": "false"},
    ),
    "probes_injection": (
        ["--no-probes-injection"],
        {"probesInjection": False},
        {"PARAM_PROBES_INJECTION": "false"},
    ),
    "login_shell": (["--login-shell"], {"loginShell": True}, {"PARAM_LOGIN_SHELL": "true"}),
    "head_cluster_ip_service": (
        ["--head-cluster-ip-service"],
        {"headClusterIPService": True},
        {"PARAM_HEAD_CLUSTER_IP_SERVICE": "true"},
    ),
    "max_pods": (["--max-pods", "5"], {"maxPods": 5}, {"PARAM_MAX_PODS": "5"}),
    "max_objects": (["--max-objects", "7"], {"maxObjects": 7}, {"PARAM_MAX_OBJECTS": "7"}),
    "max_input_bytes": (["--max-input-bytes", "999"], None, {"PARAM_MAX_INPUT_BYTES": "999"}),
    "batch_scheduler": (
        ["--batch-scheduler", "yunikorn"],
        {"batchScheduler": "yunikorn"},
        {"PARAM_BATCH_SCHEDULER": "yunikorn"},
    ),
    "enable_batch_scheduler": (
        ["--enable-batch-scheduler"],
        {"enableBatchScheduler": True},
        {"PARAM_ENABLE_BATCH_SCHEDULER": "true"},
    ),
    "kai_podgroups": (
        ["--batch-scheduler", "kai-scheduler", "--kai-podgroups"],
        {"batchScheduler": "kai-scheduler", "kaiPodgroups": True},
        {"PARAM_BATCH_SCHEDULER": "kai-scheduler", "PARAM_KAI_PODGROUPS": "true"},
    ),
    "kueue_queue": (
        ["--kueue-queue", "team-queue"],
        {"kueueQueue": "team-queue"},
        {"PARAM_KUEUE_QUEUE": "team-queue"},
    ),
    "syncer_namespace": (  # empty is meaningful: no rule for the syncer
        ["--syncer-namespace", ""],
        {"syncerNamespace": ""},
        {"PARAM_SYNCER_NAMESPACE": ""},
    ),
    "syncer_pod_labels": (
        [arg for k, v in LABELS.items() for arg in ("--syncer-pod-label", f"{k}={v}")],
        {"syncerPodLabels": LABELS},
        {"ARGOCD_APP_PARAMETERS": json.dumps([{"name": "syncer-pod-labels", "map": LABELS}])},
    ),
    "strict": (["--strict"], {"strict": True}, {"PARAM_STRICT": "true"}),
}

Outcome = tuple[RenderOptions, bool, int]


def cli_options() -> dict[str, click.Option]:
    return {p.name: p for p in cli.render.params if isinstance(p, click.Option) and p.name}


def from_cli(args: list[str]) -> Outcome:
    params = cli.render.make_context("render", ["x.yaml", *args]).params
    return settings.render_options(params), bool(params["strict"]), params["max_input_bytes"]


def test_every_render_option_is_a_krm_key_and_a_plugin_parameter() -> None:
    krm_params = {s.param for s in krm.SETTINGS_USED}
    plugin_params = {s.param for s in argocd_cmp.PARAMETERS.values()}
    for name, option in cli_options().items():
        if name == "help":
            continue
        assert (name in krm_params) != (name in krm.NOT_SETTINGS), (
            f"kuberay render {option.opts[0]}: add it to renderer.settings.SETTINGS (a "
            "functionConfig key) or to krm.NOT_SETTINGS with the reason"
        )
        assert (name in plugin_params) != (name in argocd_cmp.NOT_PARAMETERS), (
            f"kuberay render {option.opts[0]}: add it to renderer.settings.SETTINGS (a plugin "
            "parameter) or to argocd_cmp.NOT_PARAMETERS with the reason"
        )
    for setting in settings.SETTINGS:  # each setting names the CLI's own flags
        option = cli_options()[setting.param]
        assert setting.flag in option.opts
        assert setting.off in ([""] if not option.secondary_opts else option.secondary_opts)
    announced = argocd_cmp.plugin_config()["spec"]["parameters"]["static"]
    assert [p["name"] for p in announced] == list(argocd_cmp.PARAMETERS)
    assert set(SAMPLES) == {s.param for s in settings.SETTINGS}


def _as_data(value: Any) -> str:
    """A typed functionConfig value as a ConfigMap `data` string."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return ",".join(f"{k}={_as_data(v)}" for k, v in value.items())
    return str(value)


@pytest.mark.parametrize("param", list(SAMPLES))
def test_each_setting_reaches_the_same_options_through_cli_krm_and_plugin(param: str) -> None:
    cli_args, spec, environ = SAMPLES[param]
    expected = from_cli(cli_args)
    assert expected != from_cli([])
    generate = argocd_cmp.render_args(environ)
    assert generate[:2] == ["render", "."]
    assert from_cli(generate[2:]) == expected
    if spec is None:
        assert param in krm.NOT_SETTINGS
        return
    options, strict = krm.options_from({"kind": "RenderConfig", "spec": spec})
    assert (options, strict) == expected[:2]
    data = {key: _as_data(value) for key, value in spec.items()}
    assert krm.options_from({"kind": "ConfigMap", "data": data}) == (options, strict)


def test_krm_and_plugin_refuse_what_the_cli_refuses() -> None:
    def krm_error(spec: dict[str, Any]) -> str:
        with pytest.raises(krm.ConfigError) as caught:
            krm.options_from({"spec": spec})
        return str(caught.value)

    assert "'Bad_NS' cannot name a namespace" in krm_error({"syncerNamespace": "Bad_NS"})
    assert "syncerPodLabels 'app': expected KEY=VALUE" in krm_error({"syncerPodLabels": ["app"]})
    assert "kaiPodgroups needs batchScheduler kai-scheduler" in krm_error({"kaiPodgroups": True})
    assert "'slurm' is not a batch scheduler" in krm_error({"batchScheduler": "slurm"})
    assert "maxPods: expected an integer >= 1, got 0" in krm_error({"maxPods": 0})
    assert "unknown key(s) maxInputBytes" in krm_error({"maxInputBytes": 5})
    with pytest.raises(argocd_cmp.ParameterError, match="kai-podgroups: expected true or false"):
        argocd_cmp.render_args({"PARAM_KAI_PODGROUPS": "yes"})
    with pytest.raises(argocd_cmp.ParameterError, match="ARGOCD_APP_PARAMETERS is not JSON"):
        argocd_cmp.render_args({"ARGOCD_APP_PARAMETERS": "{"})
