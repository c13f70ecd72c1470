"""RayJob rendering checked against the facts of reference rayjob.md and KubeRay's own
expectations for the submitter command (controllers/ray/common/job_test.go, v1.7)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from renderer import compile as compiler
from renderer import goformat, naming, sources
from renderer.errors import ManifestError, Problem
from renderer.kinds import pipeline
from renderer.kinds import rayjob as job_kind
from renderer.model import rayjob as job_model
from renderer.objects import submitter, wrapper
from renderer.options import RenderOptions
from tests.paths import SAMPLES
from tests.validation import validate_object

Manifest = dict[str, Any]
OPTIONS = RenderOptions()


def build_rayjob(doc: Manifest, options: RenderOptions) -> tuple[list[Problem], list[Manifest]]:
    return pipeline.run(job_kind.KIND, doc, options)


ADDR = "http://127.0.0.1:8265"
HEALTH = (
    "until python -c \"import urllib.request; r=urllib.request.urlopen('{url}', timeout=10); "
    "exit(0 if b'success' in r.read() else 1)\" >/dev/null 2>&1 ; "
    'do echo "Waiting for Ray Dashboard GCS to become healthy at {addr} ..." ; sleep 2 ; done ; '
)


# --- fixtures --------------------------------------------------------------------------------


def head_container(**extra: Any) -> Manifest:
    return {
        "name": "ray-head",
        "image": "rayproject/ray:2.52.0",
        "ports": [
            {"containerPort": 6379, "name": "gcs-server"},
            {"containerPort": 8265, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
        ],
        "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
        **extra,
    }


def cluster_spec(head: Manifest | None = None, **spec: Any) -> Manifest:
    return {
        "rayVersion": "2.52.0",
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [head or head_container()]}},
        },
        "workerGroupSpecs": [
            {
                "groupName": "small",
                "replicas": 2,
                "minReplicas": 0,
                "maxReplicas": 4,
                "rayStartParams": {},
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "ray-worker",
                                "image": "rayproject/ray:2.52.0",
                                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                            }
                        ]
                    }
                },
            }
        ],
        **spec,
    }


def job_doc(
    name: str = "demo",
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Manifest:
    spec.setdefault("entrypoint", "python /home/ray/app.py")
    if "clusterSelector" not in spec:
        spec.setdefault("rayClusterSpec", cluster_spec())
    metadata: Manifest = {"name": name, "namespace": "ml"}
    if annotations:
        metadata["annotations"] = annotations
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": metadata, "spec": spec}


def build(doc: Manifest, options: RenderOptions = OPTIONS) -> list[Manifest]:
    problems, objects = build_rayjob(doc, options)
    errors = [p for p in problems if p.severity == "error"]
    assert not errors, errors
    return objects


def problems_of(doc: Manifest, options: RenderOptions = OPTIONS) -> list[Problem]:
    problems, objects = build_rayjob(doc, options)
    if any(p.severity == "error" for p in problems):
        assert objects == []
    return problems


def find(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, [o["metadata"]["name"] for o in objects if o["kind"] == kind]
    return matches[0]


def kinds(objects: list[Manifest]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def intent(objects: list[Manifest]) -> Manifest:
    config = find(objects, "ConfigMap")
    data: Manifest = json.loads(config["data"][naming.INTENT_KEY])
    return data


def pods(objects: list[Manifest]) -> list[Manifest]:
    return [o for o in objects if o["kind"] == "Pod"]


def plan_for(doc: Manifest) -> job_model.RayJobPlan:
    return job_model.parse_rayjob(doc, OPTIONS)


# --- the submitter command: KubeRay's job_test.go expectations -------------------------------

KUBERAY_TEST_SPEC: Manifest = {
    "runtimeEnvYAML": "test: test",
    "metadata": {"testKey": "testValue"},
    "rayClusterSpec": {"rayVersion": "2.6.0"},
    "entrypoint": "echo no quote 'single quote' \"double quote\"",
    "entrypointNumCpus": 1,
    "entrypointNumGpus": 0.5,
    "entrypointResources": '{"Custom_1": 1, "Custom_2": 5.5}',
}
KUBERAY_TEST_OPTIONS = (
    '--runtime-env-json "{\\"test\\":\\"test\\"}" '
    '--metadata-json "{\\"testKey\\":\\"testValue\\"}" '
    "--submission-id testJobId --entrypoint-num-cpus 1.000000 --entrypoint-num-gpus 0.500000 "
    '--entrypoint-resources "{\\"Custom_1\\": 1, \\"Custom_2\\": 5.5}" '
    "-- echo no quote 'single quote' \"double quote\" ;"
)


def test_k8s_job_mode_script_matches_kuberay_test_with_every_option() -> None:
    script = submitter.submit_script(
        KUBERAY_TEST_SPEC,
        "testJobId",
        address=ADDR,
        health_url=f"{ADDR}/api/gcs_healthz",
        status_check=True,
    )
    expected = (
        HEALTH.format(url=f"{ADDR}/api/gcs_healthz", addr=ADDR)
        + f"if ! ray job status --address {ADDR} testJobId >/dev/null 2>&1 ; then "
        + f"ray job submit --address {ADDR} --no-wait "
        + KUBERAY_TEST_OPTIONS
        + f" fi ; ray job logs --address {ADDR} --follow testJobId"
    )
    assert script == expected


def test_sidecar_script_matches_kuberay_test_without_status_check_or_logs() -> None:
    script = submitter.submit_script(
        KUBERAY_TEST_SPEC,
        "testJobId",
        address=ADDR,
        health_url="http://localhost:8265/api/gcs_healthz",
        status_check=False,
    )
    expected = (
        HEALTH.format(url="http://localhost:8265/api/gcs_healthz", addr=ADDR)
        + f"ray job submit --address {ADDR} "
        + KUBERAY_TEST_OPTIONS
    )
    assert script == expected


def test_sidecar_container_with_restart_gate_has_kuberay_k8s_job_shape() -> None:
    doc = job_doc(submissionMode="SidecarMode", **KUBERAY_TEST_SPEC | {"jobId": "testJobId"})
    doc["spec"]["rayClusterSpec"] = cluster_spec(rayVersion="2.6.0")
    options = OPTIONS.with_gates(SidecarSubmitterRestart=True)
    container = submitter.build_sidecar_submitter(plan_for(doc), options)
    expected = (
        HEALTH.format(url="http://localhost:8265/api/gcs_healthz", addr=ADDR)
        + f"if ! ray job status --address {ADDR} testJobId >/dev/null 2>&1 ; then "
        + f"ray job submit --address {ADDR} --no-wait "
        + KUBERAY_TEST_OPTIONS
        + f" fi ; ray job logs --address {ADDR} --follow testJobId"
    )
    assert container["args"] == [expected]
    assert container["restartPolicy"] == "OnFailure"


def test_sidecar_restart_gate_needs_kubernetes_1_35() -> None:
    doc = job_doc(submissionMode="SidecarMode")
    options = OPTIONS.with_gates(SidecarSubmitterRestart=True)
    messages = [p.message for p in problems_of(doc, options)]
    assert any("needs Kubernetes 1.35" in m for m in messages)
    newer = RenderOptions(kubernetes_version="1.35").with_gates(SidecarSubmitterRestart=True)
    assert not [p for p in problems_of(doc, newer) if p.severity == "error"]


def test_sidecar_defaults_to_port_8265_when_the_head_lists_no_ports() -> None:
    head = head_container()
    del head["ports"]
    doc = job_doc(submissionMode="SidecarMode", rayClusterSpec=cluster_spec(head))
    container = submitter.build_sidecar_submitter(plan_for(doc), OPTIONS)
    assert "--address http://127.0.0.1:8265 " in container["args"][0]


def test_sidecar_uses_the_custom_dashboard_container_port() -> None:
    head = head_container(ports=[{"containerPort": 9000, "name": "dashboard"}])
    doc = job_doc(submissionMode="SidecarMode", rayClusterSpec=cluster_spec(head))
    container = submitter.build_sidecar_submitter(plan_for(doc), OPTIONS)
    script = container["args"][0]
    assert "urlopen('http://localhost:9000/api/gcs_healthz'" in script
    assert "--address http://127.0.0.1:9000 " in script
    assert "wget" not in script


def test_runtime_env_yaml_becomes_json_with_sorted_keys() -> None:
    spec = {
        "runtimeEnvYAML": (
            'working_dir: "https://github.com/ray-project/serve_config_examples/archive/'
            'b393e77bbd6aba0881e3d94c05f968f05a387b96.zip"\npip: ["python-multipart==0.0.6"]\n'
        )
    }
    assert job_model.runtime_env_json(spec) == (
        '{"pip":["python-multipart==0.0.6"],"working_dir":"https://github.com/ray-project/'
        'serve_config_examples/archive/b393e77bbd6aba0881e3d94c05f968f05a387b96.zip"}'
    )


def test_runtime_env_json_escapes_html_like_go_and_is_quoted_like_strconv() -> None:
    tokens = submitter.submit_options({"runtimeEnvYAML": 'pip: ["a>=1"]'}, None)
    assert tokens == ["--runtime-env-json", '"{\\"pip\\":[\\"a\\\\u003e=1\\"]}"']


def test_runtime_env_is_read_as_yaml_1_1_with_go_number_formats() -> None:
    spec = {"runtimeEnvYAML": "flag: yes\nratio: 1.0\nsmall: 0.0000015\nbig: 1.0e+22\nn: 0x10"}
    assert job_model.runtime_env_json(spec) == (
        '{"big":1e+22,"flag":true,"n":16,"ratio":1,"small":0.0000015}'
    )


def test_runtime_env_keys_and_values_follow_go_json() -> None:
    spec = {
        "runtimeEnvYAML": (
            "~: a\nyes: b\noff: c\n1.5: d\n3: e\nneg: -0.0\ntiny: 1.0e-7\nlow: off\n"
            'ctl: "\\x01<&\\u2028"\n'
        )
    }
    assert job_model.runtime_env_json(spec) == (
        '{"1.5":"d","3":"e","ctl":"\\u0001\\u003c\\u0026\\u2028","false":"c","low":false,'
        '"neg":-0,"null":"a","tiny":1e-7,"true":"b"}'
    )


@pytest.mark.parametrize("text", ["limit: .inf", "tags: !!set {a}", "blob: !!binary aGk="])
def test_runtime_env_values_go_cannot_encode_are_refused(text: str) -> None:
    problems = problems_of(job_doc(runtimeEnvYAML=text))
    assert [p.path for p in problems if p.severity == "error"] == [("spec", "runtimeEnvYAML")]


def test_whitespace_only_runtime_env_gives_null_like_kuberay() -> None:
    assert submitter.submit_options({"runtimeEnvYAML": "  \n"}, None) == [
        "--runtime-env-json",
        '"null"',
    ]


def test_go_quote_matches_strconv_quote() -> None:
    assert goformat.go_quote('a"b\\c\n\t\x01\x7fé\u200b') == '"a\\"b\\\\c\\n\\t\\x01\\x7fé\\u200b"'
    assert goformat.go_quote("\U000e0001\U0001f600") == '"\\U000e0001\U0001f600"'


def test_entrypoint_floats_are_formatted_as_go_float32() -> None:
    assert goformat.go_float32(0.1) == "0.100000"
    assert goformat.go_float32(2) == "2.000000"
    tokens = submitter.submit_options({"entrypointNumCpus": 1e-50, "entrypointNumGpus": 0}, None)
    assert tokens == []


def test_entrypoint_is_trimmed_and_pasted_unquoted() -> None:
    script = submitter.submit_script(
        {"entrypoint": "  python -c 'print(1)' \n"},
        "id",
        address=ADDR,
        health_url=f"{ADDR}/api/gcs_healthz",
        status_check=True,
    )
    assert "--submission-id id -- python -c 'print(1)' ; fi ;" in script


def test_metadata_json_is_kept_with_cluster_selector() -> None:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "s", "image": "i"}]}}
    doc = job_doc(
        clusterSelector={"ray.io/cluster": "existing-cluster"},
        metadata={"tenant": "tenant1", "team": "ml-platform"},
        submitterPodTemplate=template,
    )
    args = find(build(doc), "Job")["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert '--metadata-json "{\\"team\\":\\"ml-platform\\",\\"tenant\\":\\"tenant1\\"}"' in args


@pytest.mark.parametrize(
    ("version", "fragment"),
    [
        ("not-a-version", "failed to parse Ray version: not-a-version"),
        ("2.5.0", "must be at least 2.6.0"),
    ],
)
def test_metadata_needs_ray_2_6_when_the_version_is_set(version: str, fragment: str) -> None:
    doc = job_doc(metadata={"k": "v"}, rayClusterSpec=cluster_spec(rayVersion=version))
    errors = [p for p in problems_of(doc) if p.path == ("spec", "metadata")]
    assert len(errors) == 1
    assert fragment in errors[0].message


def test_metadata_is_accepted_with_a_recent_ray_version() -> None:
    objects = build(job_doc(metadata={"k": "v"}, submissionMode="SidecarMode"))
    head = next(p for p in pods(objects) if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "head")
    assert '--metadata-json "{\\"k\\":\\"v\\"}"' in head["spec"]["containers"][1]["args"][0]


def test_metadata_is_accepted_without_a_ray_version() -> None:
    spec = cluster_spec()
    del spec["rayVersion"]
    objects = build(job_doc(metadata={"k": "v"}, rayClusterSpec=spec))
    args = find(objects, "Job")["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert '--metadata-json "{\\"k\\":\\"v\\"}"' in args


# --- names -----------------------------------------------------------------------------------


def test_names_are_stable_for_the_same_job() -> None:
    first, second = plan_for(job_doc()), plan_for(job_doc())
    assert (first.cluster_name, first.submission_id) == (second.cluster_name, second.submission_id)
    assert first.cluster_name.startswith("demo-")
    assert len(first.cluster_name) == len("demo-") + 5
    assert first.submission_id is not None
    assert first.submission_id.startswith("demo-")
    assert first.cluster_name != first.submission_id


def test_names_change_when_the_spec_changes() -> None:
    base = plan_for(job_doc())
    changed = plan_for(job_doc(entrypoint="python /home/ray/other.py"))
    assert changed.cluster_name != base.cluster_name
    assert changed.submission_id != base.submission_id


def test_the_run_annotation_reruns_an_unchanged_job() -> None:
    base = plan_for(job_doc())
    rerun = plan_for(job_doc(annotations={naming.RUN_ANNOTATION: "2"}))
    other = plan_for(job_doc(annotations={"team": "a"}))
    assert rerun.cluster_name != base.cluster_name
    assert rerun.submission_id != base.submission_id
    assert (other.cluster_name, other.submission_id) == (base.cluster_name, base.submission_id)


def test_writing_out_crd_defaults_keeps_the_names() -> None:
    base = plan_for(job_doc())
    explicit = plan_for(job_doc(submissionMode="K8sJobMode", backoffLimit=0))
    assert explicit.cluster_name == base.cluster_name


def test_cluster_name_fits_kuberay_limit_for_the_longest_job_name() -> None:
    name = "j" * 47
    objects = build(job_doc(name))
    plan = plan_for(job_doc(name))
    assert len(plan.cluster_name) == 53
    assert all(len(o["metadata"]["name"]) <= 63 for o in objects)


def test_too_long_job_name_is_refused() -> None:
    problems = problems_of(job_doc("j" * 48))
    assert any("no more than 47" in p.message for p in problems)


def test_spec_job_id_is_the_submission_id() -> None:
    objects = build(job_doc(jobId="my-fixed-id"))
    env = find(objects, "Job")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "RAY_JOB_SUBMISSION_ID", "value": "my-fixed-id"} in env
    assert intent(objects)["derived"]["submissionId"] == "my-fixed-id"


# --- K8sJobMode submitter Job ----------------------------------------------------------------


def test_submitter_job_is_kuberays_with_the_cluster_ready_gate() -> None:
    objects = build(job_doc(runtimeEnvYAML="pip: [requests]"))
    plan = plan_for(job_doc(runtimeEnvYAML="pip: [requests]"))
    job = find(objects, "Job")
    assert job["apiVersion"] == "batch/v1"
    assert job["metadata"]["name"] == "demo"
    assert job["metadata"]["labels"] == {
        naming.RAY_ORIGIN_NAME: "demo",
        naming.RAY_ORIGIN_CRD: "RayJob",
        naming.APP_CREATED_BY: naming.KUBERAY_OPERATOR,
        naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
        naming.ORIGIN_KIND: "RayJob",
        naming.ORIGIN_NAME: "demo",
    }
    assert job["spec"]["backoffLimit"] == 2
    assert "ttlSecondsAfterFinished" not in job["spec"]
    template = job["spec"]["template"]
    assert template["metadata"]["labels"] == job["metadata"]["labels"]
    pod = template["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["schedulingGates"] == [{"name": naming.CLUSTER_READY_GATE}]
    (container,) = pod["containers"]
    assert container["name"] == "ray-job-submitter"
    assert container["image"] == "rayproject/ray:2.52.0"
    assert container["command"] == ["/bin/bash", "-ce", "--"]
    assert container["resources"] == {
        "limits": {"cpu": "1", "memory": "1Gi"},
        "requests": {"cpu": "500m", "memory": "200Mi"},
    }
    url = f"{plan.cluster_name}-head-svc.ml.svc.cluster.local:8265"
    assert container["env"] == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "RAY_DASHBOARD_ADDRESS", "value": url},
        {"name": "RAY_JOB_SUBMISSION_ID", "value": plan.submission_id},
    ]
    (args,) = container["args"]
    assert args.startswith(
        f"until python -c \"import urllib.request; r=urllib.request.urlopen('http://{url}/api/gcs_healthz'"
    )
    assert f"ray job submit --address http://{url} --no-wait --runtime-env-json " in args
    assert f"--submission-id {plan.submission_id} -- python /home/ray/app.py ; fi ;" in args
    assert args.endswith(f"ray job logs --address http://{url} --follow {plan.submission_id}")


def test_submitter_matches_the_worked_example_of_the_reference() -> None:
    # rayjob.md §8.1, with our deterministic names in place of the random ones.
    (sample,) = [
        d.data
        for d in sources.read_documents([str(SAMPLES / "ray-job.sample.yaml")])[0]
        if d.data["kind"] == "RayJob"
    ]
    plan = job_model.parse_rayjob(sample, OPTIONS)
    objects = build(sample)
    container = find(objects, "Job")["spec"]["template"]["spec"]["containers"][0]
    addr = f"http://{plan.cluster_name}-head-svc.default.svc.cluster.local:8265"
    sid = plan.submission_id
    expected = (
        HEALTH.format(url=f"{addr}/api/gcs_healthz", addr=addr)
        + f"if ! ray job status --address {addr} {sid} >/dev/null 2>&1 ; then "
        + f"ray job submit --address {addr} --no-wait --runtime-env-json "
        + '"{\\"env_vars\\":{\\"counter_name\\":\\"test_counter\\"},'
        + '\\"pip\\":[\\"requests==2.26.0\\",\\"pendulum==2.1.2\\"]}" '
        + f"--submission-id {sid} -- python /home/ray/samples/sample_code.py ; fi ; "
        + f"ray job logs --address {addr} --follow {sid}"
    )
    assert container["args"] == [expected]


def test_submitter_config_backoff_limit_and_login_shell() -> None:
    doc = job_doc(submitterConfig={"backoffLimit": 0})
    job = find(build(doc, RenderOptions(login_shell=True)), "Job")
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "/bin/bash",
        "-cel",
        "--",
    ]


def test_user_submitter_template_keeps_its_command_and_gets_env_labels_and_gate() -> None:
    template = {
        "metadata": {"labels": {"team": "ml"}},
        "spec": {
            "restartPolicy": "Never",
            "schedulingGates": [{"name": "other"}],
            "containers": [
                {
                    "name": "light",
                    "image": "quay.io/kuberay/submitter:v1.5.1",
                    "command": ["/submitter"],
                    "args": ["--", "python", "app.py"],
                    "env": [{"name": "PYTHONUNBUFFERED", "value": "0"}],
                }
            ],
        },
    }
    job = find(build(job_doc(submitterPodTemplate=template)), "Job")
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert pod["metadata"]["labels"][naming.RAY_ORIGIN_CRD] == "RayJob"
    assert pod["spec"]["schedulingGates"] == [
        {"name": "other"},
        {"name": naming.CLUSTER_READY_GATE},
    ]
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["/submitter"]
    assert container["args"] == ["--", "python", "app.py"]
    # KubeRay appends its env even after a user entry of the same name.
    assert [e["name"] for e in container["env"]] == [
        "PYTHONUNBUFFERED",
        "PYTHONUNBUFFERED",
        "RAY_DASHBOARD_ADDRESS",
        "RAY_JOB_SUBMISSION_ID",
    ]
    assert "resources" not in container


def test_user_submitter_template_without_command_gets_the_script() -> None:
    template = {
        "spec": {
            "restartPolicy": "OnFailure",
            "containers": [{"name": "s", "image": "img", "args": ["x"]}],
        }
    }
    container = find(build(job_doc(submitterPodTemplate=template)), "Job")["spec"]["template"][
        "spec"
    ]["containers"][0]
    assert container["command"] == ["/bin/bash", "-ce", "--"]
    assert container["args"][0].startswith("until python -c")


def test_user_submitter_template_needs_a_container() -> None:
    template = {"spec": {"restartPolicy": "Never", "containers": []}}
    problems = problems_of(job_doc(submitterPodTemplate=template))
    assert [p.message for p in problems] == ["submitterPodTemplate needs at least one container"]


def test_user_submitter_template_needs_a_job_restart_policy() -> None:
    template = {"spec": {"containers": [{"name": "s", "image": "img"}]}}
    problems = problems_of(job_doc(submitterPodTemplate=template))
    assert [p.path for p in problems if p.severity == "error"] == [
        ("spec", "submitterPodTemplate", "spec")
    ]


def test_submitter_gets_token_auth_env_from_the_cluster_secret() -> None:
    spec = cluster_spec(authOptions={"mode": "token", "secretName": "ray-token"})
    container = find(build(job_doc(rayClusterSpec=spec)), "Job")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["env"][3:] == [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {
            "name": "RAY_AUTH_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "ray-token", "key": "auth_token"}},
        },
    ]


# --- the cluster -----------------------------------------------------------------------------


def test_cluster_pods_run_never_restart_under_the_wrapper_with_podinfo() -> None:
    objects = build(job_doc())
    plan = plan_for(job_doc())
    found = pods(objects)
    assert len(found) == 3
    for pod in found:
        assert pod["metadata"]["name"].startswith(plan.cluster_name)
        assert pod["metadata"]["labels"][naming.ORIGIN_KIND] == "RayJob"
        assert pod["metadata"]["labels"][naming.ORIGIN_NAME] == "demo"
        # KubeRay's RayCluster labels do not reach the Pods (rayjob.md §8.2).
        assert naming.RAY_ORIGIN_CRD not in pod["metadata"]["labels"]
        spec = pod["spec"]
        assert spec["restartPolicy"] == "Never"
        ray = spec["containers"][0]
        bare = next(e["value"] for e in ray["env"] if e["name"] == "KUBERAY_GEN_RAY_START_CMD")
        assert ray["args"] == [
            "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}; " + wrapper.wrap_ray_start(bare)
        ]
        assert bare.startswith("ray start")
        assert "--block" in bare
        assert {
            "name": "kuberay-podinfo",
            "mountPath": "/etc/kuberay/podinfo",
            "readOnly": True,
        } in ray["volumeMounts"]
        assert {
            "name": "kuberay-podinfo",
            "downwardAPI": {
                "items": [
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
                ]
            },
        } in spec["volumes"]
    head = next(p for p in found if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "head")
    tags = next(
        e["value"]
        for e in head["spec"]["containers"][0]["env"]
        if e["name"] == "RAY_USAGE_STATS_EXTRA_TAGS"
    )
    assert tags.endswith("kuberay_crd=RayJob")


def test_raycluster_pods_are_not_wrapped() -> None:
    doc = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "plain", "namespace": "ml"},
        "spec": cluster_spec(),
    }
    documents, problems = sources.parse_text(json.dumps(doc), "c.yaml")
    assert not problems
    objects = compiler.render(documents, OPTIONS).objects
    for pod in pods(list(objects)):
        assert naming.SHUTDOWN_REQUESTED not in pod["spec"]["containers"][0]["args"][0]
        assert "restartPolicy" not in pod["spec"]
        assert all(v["name"] != "kuberay-podinfo" for v in pod["spec"].get("volumes", []))


def test_user_ray_start_command_cannot_be_wrapped_and_warns() -> None:
    head = head_container(command=["/bin/bash", "-c"], args=["ray start --head --block"])
    problems, objects = build_rayjob(job_doc(rayClusterSpec=cluster_spec(head)), OPTIONS)
    warnings = [p for p in problems if p.severity == "warning"]
    assert [p.path for p in warnings] == [
        ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "containers", 0)
    ]
    assert "cannot wrap it" in warnings[0].message
    assert objects


def test_reserved_podinfo_volume_name_is_refused() -> None:
    spec = cluster_spec()
    spec["headGroupSpec"]["template"]["spec"]["volumes"] = [
        {"name": "kuberay-podinfo", "emptyDir": {}}
    ]
    problems = problems_of(job_doc(rayClusterSpec=spec))
    assert [p.path for p in problems] == [
        ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "volumes", 0, "name")
    ]


def test_reserved_podinfo_mount_path_is_refused() -> None:
    spec = cluster_spec()
    worker = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    worker["volumeMounts"] = [{"name": "x", "mountPath": "/etc/kuberay/podinfo"}]
    problems = problems_of(job_doc(rayClusterSpec=spec))
    assert [p.path for p in problems] == [
        (
            "spec",
            "rayClusterSpec",
            "workerGroupSpecs",
            0,
            "template",
            "spec",
            "containers",
            0,
            "volumeMounts",
            0,
            "mountPath",
        )
    ]


def test_cluster_problems_found_while_building_are_reported() -> None:
    doc = job_doc(annotations={"ray.io/enable-serve-service": "true"})
    problems = problems_of(doc)
    assert [p.path for p in problems] == [
        ("metadata", "annotations", "ray.io/enable-serve-service")
    ]


def test_custom_head_service_named_like_the_job_service_is_not_rendered_twice() -> None:
    spec = cluster_spec()
    spec["headGroupSpec"]["headService"] = {"metadata": {"name": "demo-head-svc"}}
    objects = build(job_doc(rayClusterSpec=spec))
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "Service"] == ["demo-head-svc"]
    assert intent(objects)["derived"]["jobHeadServiceName"] is None


def test_job_head_service_is_kuberays_stable_service() -> None:
    objects = build(job_doc())
    plan = plan_for(job_doc())
    cluster_svc = find(objects, "Service", f"{plan.cluster_name}-head-svc")
    job_svc = find(objects, "Service", "demo-head-svc")
    assert job_svc["spec"] == cluster_svc["spec"]
    assert job_svc["metadata"]["labels"] == {
        naming.RAY_ORIGIN_NAME: "demo",
        naming.RAY_ORIGIN_CRD: "RayJob",
        naming.RAY_NODE_TYPE: "head",
        naming.RAY_IDENTIFIER: "demo-head",
        naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
        naming.ORIGIN_KIND: "RayJob",
        naming.ORIGIN_NAME: "demo",
    }


def test_custom_head_service_sets_the_dashboard_url() -> None:
    spec = cluster_spec()
    spec["headGroupSpec"]["headService"] = {"metadata": {"name": "custom-head"}}
    objects = build(job_doc(rayClusterSpec=spec))
    url = "custom-head.ml.svc.cluster.local:8265"
    env = find(objects, "Job")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "RAY_DASHBOARD_ADDRESS", "value": url} in env
    assert intent(objects)["derived"]["dashboardURL"] == f"http://{url}"


def test_head_without_a_dashboard_port_is_refused() -> None:
    head = head_container(ports=[{"containerPort": 6379, "name": "gcs-server"}])
    problems = problems_of(job_doc(rayClusterSpec=cluster_spec(head)))
    assert any("none named 'dashboard'" in p.message for p in problems)


def test_every_object_carries_the_source_labels() -> None:
    for mode in ("K8sJobMode", "SidecarMode", "HTTPMode", "InteractiveMode"):
        for obj in build(job_doc(submissionMode=mode)):
            labels = obj["metadata"]["labels"]
            assert labels[naming.MANAGED_BY] == naming.MANAGED_BY_VALUE, obj["metadata"]["name"]
            assert labels[naming.ORIGIN_KIND] == "RayJob"
            assert labels[naming.ORIGIN_NAME] == "demo"


# --- modes -----------------------------------------------------------------------------------


def test_sidecar_mode_puts_the_submitter_in_the_head_pod() -> None:
    doc = job_doc(submissionMode="SidecarMode")
    objects = build(doc)
    plan = plan_for(doc)
    assert "Job" not in kinds(objects)
    head = next(p for p in pods(objects) if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "head")
    ray, submitter = head["spec"]["containers"]
    assert head["spec"]["restartPolicy"] == "Never"
    assert submitter["name"] == "ray-job-submitter"
    assert submitter["image"] == ray["image"]
    assert "restartPolicy" not in submitter
    assert "volumeMounts" not in submitter
    assert submitter["env"] == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "RAY_DASHBOARD_ADDRESS", "value": ""},
        {"name": "RAY_JOB_SUBMISSION_ID", "value": plan.submission_id},
    ]
    assert submitter["args"][0].endswith(
        f"ray job submit --address http://127.0.0.1:8265 --submission-id {plan.submission_id} "
        "-- python /home/ray/app.py ;"
    )
    derived = intent(objects)["derived"]
    assert derived["submitterContainerName"] == "ray-job-submitter"
    assert derived["submitterJobName"] is None
    cluster = job_model.job_cluster(plan, plan.spec["rayClusterSpec"])
    assert cluster.labels[naming.RAY_JOB_SUBMISSION_MODE] == "SidecarMode"


@pytest.mark.parametrize("mode", ["HTTPMode", "InteractiveMode"])
def test_http_and_interactive_modes_have_no_submitter(mode: str) -> None:
    objects = build(job_doc(submissionMode=mode))
    assert "Job" not in kinds(objects)
    for pod in pods(objects):
        assert len(pod["spec"]["containers"]) == 1
    derived = intent(objects)["derived"]
    assert derived["submitterJobName"] is None
    assert derived["submissionMode"] == mode
    if mode == "InteractiveMode":
        assert derived["submissionId"] is None
    else:
        assert derived["submissionId"] == plan_for(job_doc(submissionMode=mode)).submission_id


def test_unknown_submission_mode_warns_and_submits_nothing() -> None:
    problems, objects = build_rayjob(job_doc(submissionMode="Batch"), OPTIONS)
    assert [p.severity for p in problems] == ["warning"]
    assert "Job" not in kinds(objects)


def test_cluster_selector_renders_no_cluster_and_targets_the_selected_head() -> None:
    template = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "s", "image": "rayproject/ray:2.52.0"}],
        }
    }
    doc = job_doc(clusterSelector={"ray.io/cluster": "shared"}, submitterPodTemplate=template)
    objects = build(doc)
    assert kinds(objects) == ["ConfigMap", "Job"]
    container = find(objects, "Job")["spec"]["template"]["spec"]["containers"][0]
    url = "shared-head-svc.ml.svc.cluster.local:8265"
    assert {"name": "RAY_DASHBOARD_ADDRESS", "value": url} in container["env"]
    assert f"ray job submit --address http://{url} --no-wait" in container["args"][0]
    derived = intent(objects)["derived"]
    assert derived["clusterName"] == "shared"
    assert derived["clusterRendered"] is False
    assert derived["headPodName"] is None


def test_cluster_selector_without_a_submitter_template_is_one_clear_error() -> None:
    problems = problems_of(job_doc(clusterSelector={"ray.io/cluster": "shared"}))
    assert [p.path for p in problems] == [("spec", "clusterSelector")]
    assert "submitterPodTemplate" in problems[0].message


def test_cluster_selector_in_http_mode_needs_no_template() -> None:
    objects = build(
        job_doc(clusterSelector={"ray.io/cluster": "shared"}, submissionMode="HTTPMode")
    )
    assert kinds(objects) == ["ConfigMap"]


def test_suspended_job_renders_only_its_intent() -> None:
    objects = build(job_doc(suspend=True, shutdownAfterJobFinishes=True))
    assert kinds(objects) == ["ConfigMap"]
    assert intent(objects)["derived"]["clusterRendered"] is False


def test_managed_by_another_controller_renders_nothing() -> None:
    problems, objects = build_rayjob(job_doc(managedBy="kueue.x-k8s.io/multikueue"), OPTIONS)
    assert objects == []
    assert [p.severity for p in problems] == ["warning"]


# --- the intent ConfigMap --------------------------------------------------------------------


def test_intent_holds_metadata_spec_and_derived_facts() -> None:
    doc = job_doc(
        labels={"team": "ml"},
        annotations={naming.RUN_ANNOTATION: "3"},
        runtimeEnvYAML="env_vars: {A: '1'}",
        ttlSecondsAfterFinished=60,
        shutdownAfterJobFinishes=True,
        backoffLimit=1,  # the syncer submits the retry, so the intent keeps the runtime env
    )
    objects = build(doc)
    plan = plan_for(doc)
    config = find(objects, "ConfigMap")
    assert config["metadata"]["name"] == "demo-kuberay-intent"
    assert config["metadata"]["labels"] == {
        naming.MANAGED_BY: naming.MANAGED_BY_VALUE,
        naming.ORIGIN_KIND: "RayJob",
        naming.ORIGIN_NAME: "demo",
        naming.ROLE: naming.ROLE_INTENT,
    }
    text = config["data"][naming.INTENT_KEY]
    assert text == naming.canonical_json(json.loads(text))
    data = json.loads(text)
    assert data["version"] == 1
    assert data["kind"] == "RayJob"
    assert data["metadata"] == {
        "name": "demo",
        "namespace": "ml",
        "labels": {"team": "ml"},
        "annotations": {naming.RUN_ANNOTATION: "3"},
    }
    assert "rayClusterSpec" not in data["spec"]
    assert "runtimeEnvYAML" not in data["spec"]
    assert data["spec"]["ttlSecondsAfterFinished"] == 60
    worker_names = sorted(
        p["metadata"]["name"]
        for p in pods(objects)
        if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "worker"
    )
    assert data["derived"] == {
        "submissionMode": "K8sJobMode",
        "clusterName": plan.cluster_name,
        "clusterRendered": True,
        "submissionId": plan.submission_id,
        "headServiceName": f"{plan.cluster_name}-head-svc",
        "jobHeadServiceName": "demo-head-svc",
        "dashboardURL": f"http://{plan.cluster_name}-head-svc.ml.svc.cluster.local:8265",
        "submitterJobName": "demo",
        "submitterContainerName": None,
        "headPodName": next(
            p["metadata"]["name"]
            for p in pods(objects)
            if p["metadata"]["labels"][naming.RAY_NODE_TYPE] == "head"
        ),
        "workerPodNames": worker_names,
        "runtimeEnv": {"env_vars": {"A": "1"}},
    }


def test_rendered_rayjob_objects_are_valid_kubernetes() -> None:
    for mode in ("K8sJobMode", "SidecarMode", "HTTPMode"):
        for obj in build(job_doc(submissionMode=mode)):
            assert validate_object(obj) == [], (mode, obj["kind"], obj["metadata"]["name"])


# --- the wrapper script, run for real --------------------------------------------------------

FAKE_RAY = """#!/bin/bash
case "$1" in
  start)
    trap 'echo term >> "$STATE/log"; exit 143' TERM
    echo $$ > "$STATE/start.pid"
    if [ -n "$RAY_EXIT" ]; then sleep 0.2; exit "$RAY_EXIT"; fi
    while true; do sleep 0.1; done
    ;;
  stop)
    echo stop >> "$STATE/log"
    kill -KILL "$(cat "$STATE/start.pid")"
    ;;
esac
"""


@pytest.fixture
def fake_ray(tmp_path: Path) -> Iterator[Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    ray.write_text(FAKE_RAY)
    ray.chmod(0o755)
    yield tmp_path
    pid_file = tmp_path / "start.pid"
    if pid_file.exists():  # never leave the fake Ray running
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def start_wrapper(state: Path, ray_exit: str = "") -> subprocess.Popen[bytes]:
    script = wrapper.wrap_ray_start(
        "ray start --head --block ", annotations_file=str(state / "annotations")
    )
    env = {
        **os.environ,
        "PATH": f"{state / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "STATE": str(state),
        "RAY_EXIT": ray_exit,
    }
    with (state / "out.txt").open("wb") as out:
        return subprocess.Popen(["bash", "-c", script], env=env, stdout=out, stderr=out)


def wait_for(path: Path, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


@pytest.mark.timeout(10)
def test_wrapper_stops_ray_and_exits_zero_on_the_shutdown_annotation(fake_ray: Path) -> None:
    proc = start_wrapper(fake_ray)
    try:
        wait_for(fake_ray / "start.pid")
        (fake_ray / "annotations").write_text(f'other="x"\n{naming.SHUTDOWN_REQUESTED}="true"\n')
        assert proc.wait(timeout=8) == 0
    finally:
        proc.kill()
        proc.wait()
    assert (fake_ray / "log").read_text() == "stop\n"


@pytest.mark.timeout(10)
def test_wrapper_ignores_other_annotations_and_returns_rays_exit_code(fake_ray: Path) -> None:
    (fake_ray / "annotations").write_text(f'{naming.SHUTDOWN_REQUESTED}-not="true"\n')
    proc = start_wrapper(fake_ray, ray_exit="7")
    try:
        assert proc.wait(timeout=8) == 7
    finally:
        proc.kill()
        proc.wait()
    assert not (fake_ray / "log").exists()


@pytest.mark.timeout(10)
def test_wrapper_forwards_sigterm_to_ray(fake_ray: Path) -> None:
    proc = start_wrapper(fake_ray)
    try:
        wait_for(fake_ray / "start.pid")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=8) == 143
    finally:
        proc.kill()
        proc.wait()
    assert (fake_ray / "log").read_text() == "term\n"


# --- KubeRay's samples -----------------------------------------------------------------------

# Samples the renderer refuses, and the one line that says why.
REFUSED = {
    "ray-job.kueue-toy-sample.yaml": "generateName is not supported",
    "ray-job.pytorch-image-classifier.yaml": "generateName is not supported",
    "ray-job.pytorch-distributed-training.yaml": "generateName is not supported",
    "ray-job.use-existing-raycluster.yaml": "needs spec.submitterPodTemplate",
}


def _has_rayjob(path: Path) -> bool:
    documents, problems = sources.read_documents([str(path)])
    return not problems and any(
        isinstance(d.data, dict) and d.data.get("kind") == "RayJob" for d in documents
    )


JOB_SAMPLES = sorted(p for p in SAMPLES.rglob("*.yaml") if _has_rayjob(p))


def test_the_rayjob_samples_are_there() -> None:
    assert len(JOB_SAMPLES) >= 15, f"expected the KubeRay samples under {SAMPLES}"


@pytest.mark.parametrize("sample", JOB_SAMPLES, ids=[p.name for p in JOB_SAMPLES])
def test_rayjob_sample_renders(sample: Path) -> None:
    documents, problems = sources.read_documents([str(sample)])
    assert not problems
    refusal = REFUSED.get(sample.name)
    if refusal is not None:
        with pytest.raises(ManifestError) as caught:
            compiler.render(documents, OPTIONS)
        messages = [d.problem.message for d in caught.value.diagnostics]
        assert any(refusal in m for m in messages), messages
        return
    objects = compiler.render(documents, OPTIONS).objects
    assert any(
        o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-kuberay-intent")
        for o in objects
    )
    failures = {
        f"{o['kind']}/{o['metadata']['name']}": found
        for o in objects
        if (found := validate_object(o))
    }
    assert not failures


# --- the runtime env in the intent (security review L7) -------------------------------------

RUNTIME_ENV = 'env_vars: {API_KEY: "s3cr3t"}\npip: ["a"]\n'


@pytest.mark.parametrize(
    ("mode", "backoff", "carried"),
    [
        ("HTTPMode", None, True),  # the syncer submits it
        ("K8sJobMode", 2, True),  # retries are submitted by the syncer over HTTP
        ("SidecarMode", 1, True),
        ("K8sJobMode", None, False),  # the submitter Job submits; no retry
        ("K8sJobMode", 0, False),
        ("SidecarMode", None, False),
        ("InteractiveMode", None, False),  # the user submits
    ],
)
def test_the_intent_carries_the_runtime_env_only_when_the_syncer_submits(
    mode: str, backoff: int | None, carried: bool
) -> None:
    spec: dict[str, Any] = {"submissionMode": mode, "runtimeEnvYAML": RUNTIME_ENV}
    if backoff is not None:
        spec["backoffLimit"] = backoff
    found = intent(build(job_doc(**spec)))
    assert "runtimeEnvYAML" not in found["spec"]  # never the raw text
    expected = {"env_vars": {"API_KEY": "s3cr3t"}, "pip": ["a"]} if carried else None
    assert found["derived"]["runtimeEnv"] == expected
