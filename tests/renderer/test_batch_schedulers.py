"""Batch schedulers and Kueue: KubeRay's numbers, Go's text forms and the emitted fields.

No Volcano, scheduler-plugins or KAI CRD schema is in ../shared/upstream/crd-json-schemas/
(only Argo CD, cert-manager, Gateway API, Flux and Prometheus), so the PodGroups are checked
by hand: `test_pod_groups_carry_only_fields_of_their_crds` lists the spec fields
batch-schedulers.md §2.1/§2.3 names for `scheduling.volcano.sh/v1beta1` (minMember,
minResources, queue, priorityClassName, networkTopology.{mode,highestTierAllowed}) and
`scheduling.x-k8s.io/v1alpha1` (minMember, minResources) and fails on any other key, on a
status or on an ownerReference.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import pytest
from click.testing import CliRunner

from renderer import RenderOptions, sources
from renderer import compile as compiler
from renderer.cli import main
from renderer.errors import ManifestError
from renderer.model import schedulers as bs
from renderer.objects.batchscheduling import pod_resources, resource_list, volcano_gang_size
from renderer.quantity import BINARY_SI, DECIMAL_SI, format_quantity, parse_quantity

Manifest = dict[str, Any]

POD_256 = """
          containers:
          - name: {name}
            image: rayproject/ray:2.52.0
            resources:
              requests: {{cpu: 256m, memory: 256Mi}}"""


def _job(mode: str, labels: str = "", extra: str = "") -> str:
    return f"""
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: vc-job
  labels: {{{labels}}}
spec:
  entrypoint: python -c "print(1)"
  submissionMode: {mode}
  shutdownAfterJobFinishes: true{extra}
  rayClusterSpec:
    headGroupSpec:
      template:
        spec:{POD_256.format(name="ray-head")}
    workerGroupSpecs:
    - groupName: workers
      replicas: 2
      template:
        spec:{POD_256.format(name="ray-worker")}
"""


def _cluster(labels: str = "", spec_extra: str = "", group_extra: str = "") -> str:
    return f"""
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: vc
  labels: {{{labels}}}
spec:{spec_extra}
  headGroupSpec:
    template:
      spec:{POD_256.format(name="ray-head")}
  workerGroupSpecs:
  - groupName: workers
    replicas: 2{group_extra}
    template:
      spec:{POD_256.format(name="ray-worker")}
"""


def render(text: str, **options: Any) -> list[Manifest]:
    documents, problems = sources.parse_text(text, "test.yaml")
    assert not problems
    return list(compiler.render(documents, RenderOptions(**options)).objects)


def kinds(objects: list[Manifest], kind: str) -> list[Manifest]:
    return [o for o in objects if o["kind"] == kind]


def pods(objects: list[Manifest]) -> list[Manifest]:
    """Every pod and pod template (the submitter Job's) among `objects`."""
    out = kinds(objects, "Pod")
    out += [job["spec"]["template"] for job in kinds(objects, "Job")]
    return out


def pod_group(objects: list[Manifest]) -> Manifest:
    groups = kinds(objects, "PodGroup")
    assert len(groups) == 1, groups
    return groups[0]


# --- Volcano: KubeRay's unit-test numbers (volcano_scheduler_test.go) ------------------------


def test_volcano_raycluster_head_and_two_workers() -> None:
    group = pod_group(render(_cluster(), batch_scheduler="volcano"))
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["metadata"]["name"] == "ray-vc-pg"
    assert group["spec"] == {"minMember": 3, "minResources": {"cpu": "768m", "memory": "768Mi"}}


@pytest.mark.parametrize(
    ("mode", "cpu", "memory"),
    [
        ("K8sJobMode", "1268m", "968Mi"),
        ("SidecarMode", "1268m", "968Mi"),
        ("HTTPMode", "768m", "768Mi"),
        ("InteractiveMode", "768m", "768Mi"),
    ],
)
def test_volcano_rayjob_submitter_counts_in_resources_not_members(
    mode: str, cpu: str, memory: str
) -> None:
    group = pod_group(render(_job(mode), batch_scheduler="volcano"))
    assert group["metadata"]["name"] == "ray-vc-job-pg"
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["minResources"] == {"cpu": cpu, "memory": memory}


def test_volcano_custom_submitter_template_is_what_counts() -> None:
    extra = """
  submitterPodTemplate:
    spec:
      restartPolicy: Never
      containers:
      - name: submit
        image: rayproject/ray:2.52.0
        resources:
          limits: {cpu: "1", memory: 1Gi}"""
    group = pod_group(render(_job("K8sJobMode", extra=extra), batch_scheduler="volcano"))
    assert group["spec"]["minResources"] == {"cpu": "1768m", "memory": "1792Mi"}


def test_volcano_autoscaling_uses_min_replicas() -> None:
    """The renderer refuses autoscaling today, so KubeRay's min-count branch is tested directly."""
    pod = {"containers": [{"resources": {"requests": {"cpu": "256m", "memory": "256Mi"}}}]}
    spec = {
        "enableInTreeAutoscaling": True,
        "headGroupSpec": {"template": {"spec": pod}},
        "workerGroupSpecs": [
            {
                "groupName": "w",
                "replicas": 3,
                "minReplicas": 1,
                "numOfHosts": 2,
                "template": {"spec": pod},
            },
        ],
    }
    size = volcano_gang_size(spec)
    assert size.members == 3
    assert resource_list(size.resources) == {"cpu": "768m", "memory": "768Mi"}


def test_volcano_raw_replicas_for_resources_clamped_for_members() -> None:
    # replicas 2 < minReplicas 4: KubeRay counts 4 members per group but 2 pods' resources.
    group = pod_group(
        render(_cluster(group_extra="\n    minReplicas: 4"), batch_scheduler="volcano")
    )
    assert group["spec"] == {"minMember": 5, "minResources": {"cpu": "768m", "memory": "768Mi"}}


def test_volcano_multi_host_and_suspended_groups() -> None:
    group = pod_group(
        render(_cluster(group_extra="\n    numOfHosts: 2"), batch_scheduler="volcano")
    )
    assert group["spec"] == {"minMember": 5, "minResources": {"cpu": "1280m", "memory": "1280Mi"}}
    suspended = pod_group(
        render(_cluster(group_extra="\n    suspend: true"), batch_scheduler="volcano")
    )
    assert suspended["spec"] == {
        "minMember": 1,
        "minResources": {"cpu": "256m", "memory": "256Mi"},
    }


def test_volcano_suspended_cluster_and_job_have_no_pod_group() -> None:
    assert not kinds(
        render(_cluster(spec_extra="\n  suspend: true"), batch_scheduler="volcano"), "PodGroup"
    )
    job = _job("K8sJobMode", extra="\n  suspend: true")
    assert not kinds(render(job, batch_scheduler="volcano"), "PodGroup")


def test_volcano_pod_metadata_on_every_pod_and_the_submitter() -> None:
    labels = '"volcano.sh/queue-name": q1, "ray.io/priority-class-name": hi'
    objects = render(_job("K8sJobMode", labels=labels), batch_scheduler="volcano")
    group = pod_group(objects)
    assert group["spec"]["queue"] == "q1"
    assert group["spec"]["priorityClassName"] == "hi"
    seen = set()
    for pod in pods(objects):
        meta = pod["metadata"]
        assert pod["spec"]["schedulerName"] == "volcano"
        assert meta["annotations"][bs.VOLCANO_GROUP_ANNOTATION] == "ray-vc-job-pg"
        assert meta["labels"][bs.VOLCANO_QUEUE_LABEL] == "q1"
        assert meta["labels"][bs.PRIORITY_CLASS_LABEL] == "hi"
        assert "priorityClassName" not in pod["spec"]  # KubeRay sets only the label
        seen.add(meta["annotations"][bs.VOLCANO_TASK_SPEC_ANNOTATION])
    assert seen == {"headgroup", "workers", "submittergroup"}
    assert len(pods(objects)) == 4


def test_volcano_overrides_the_templates_scheduler_name() -> None:
    text = _cluster().replace("      spec:\n", "      spec:\n          schedulerName: mine\n")
    for pod in pods(render(text, batch_scheduler="volcano")):
        assert pod["spec"]["schedulerName"] == "volcano"


def test_no_scheduler_renders_nothing_extra() -> None:
    objects = render(_job("K8sJobMode"))
    assert not kinds(objects, "PodGroup")
    for pod in pods(objects):
        assert "schedulerName" not in pod["spec"]
        assert bs.VOLCANO_GROUP_ANNOTATION not in (pod["metadata"].get("annotations") or {})


def test_pod_groups_carry_only_fields_of_their_crds() -> None:
    """Hand check against the reference (no Volcano / scheduler-plugins CRD schema here)."""
    labels = (
        '"volcano.sh/queue-name": q, "ray.io/priority-class-name": p, '
        '"volcano.sh/network-topology-mode": soft, '
        '"volcano.sh/network-topology-highest-tier-allowed": "3", '
        '"ray.io/gang-scheduling-enabled": "true"'
    )
    allowed = {
        "volcano": {"minMember", "minResources", "queue", "priorityClassName", "networkTopology"},
        "scheduler-plugins": {"minMember", "minResources"},
    }
    for scheduler, fields in allowed.items():
        group = pod_group(render(_cluster(labels=labels), batch_scheduler=scheduler))
        assert set(group) == {"apiVersion", "kind", "metadata", "spec"}
        assert set(group["spec"]) == fields
        assert "ownerReferences" not in group["metadata"]
        assert isinstance(group["spec"]["minMember"], int)
        for value in group["spec"]["minResources"].values():
            assert parse_quantity(value) is not None
        if scheduler == "volcano":
            assert group["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 3}


# --- YuniKorn --------------------------------------------------------------------------------


def test_yunikorn_task_groups_match_kuberays_test_form() -> None:
    """yunikorn_scheduler_test.go:510's head and submitter entries, byte for byte."""
    text = _job("K8sJobMode", labels='"ray.io/gang-scheduling-enabled": "true"').replace(
        "{cpu: 256m, memory: 256Mi}", "{cpu: '1', memory: 1Gi}"
    )
    objects = render(text, batch_scheduler="yunikorn")
    expected = (
        '[{"minResource":{"cpu":"1","memory":"1Gi"},"name":"headgroup","minMember":1},'
        '{"minResource":{"cpu":"1","memory":"1Gi"},"name":"workers","minMember":0},'
        '{"minResource":{"cpu":"500m","memory":"200Mi"},"name":"submittergroup","minMember":1}]'
    )
    names = set()
    for pod in pods(objects):
        annotations = pod["metadata"]["annotations"]
        assert annotations[bs.YUNIKORN_TASK_GROUPS] == expected
        names.add(annotations[bs.YUNIKORN_TASK_GROUP_NAME])
        assert pod["spec"]["schedulerName"] == "yunikorn"
    assert names == {"headgroup", "workers", "submittergroup"}
    assert not kinds(objects, "PodGroup")


def test_yunikorn_without_the_gang_key_has_no_task_groups() -> None:
    labels = '"yunikorn.apache.org/app-id": app, "yunikorn.apache.org/queue": root.a'
    for pod in pods(render(_cluster(labels=labels), batch_scheduler="yunikorn")):
        assert pod["metadata"]["labels"]["applicationId"] == "app"
        assert pod["metadata"]["labels"]["queue"] == "root.a"
        annotations = pod["metadata"].get("annotations") or {}
        assert bs.YUNIKORN_TASK_GROUPS not in annotations


def test_yunikorn_uses_the_parents_own_task_groups() -> None:
    text = _cluster(labels='"ray.io/gang-scheduling-enabled": x').replace(
        "  labels:", '  annotations: {"yunikorn.apache.org/task-groups": "[]"}\n  labels:'
    )
    for pod in pods(render(text, batch_scheduler="yunikorn")):
        assert pod["metadata"]["annotations"][bs.YUNIKORN_TASK_GROUPS] == "[]"


def test_yunikorn_json_is_go_json_marshal() -> None:
    text = _cluster(labels='"ray.io/gang-scheduling-enabled": "true"').replace(
        "  - groupName: workers\n    replicas: 2\n    template:\n      spec:",
        "  - groupName: workers\n    replicas: 2\n    minReplicas: 2\n    template:\n      spec:\n"
        "          nodeSelector: {b: '<x>', a: '1'}\n"
        "          tolerations: [{effect: NoSchedule, tolerationSeconds: 5, key: k, "
        "operator: Equal, value: v}]",
    )
    objects = render(text, batch_scheduler="yunikorn")
    groups = pods(objects)[0]["metadata"]["annotations"][bs.YUNIKORN_TASK_GROUPS]
    assert groups.endswith(
        '{"minResource":{"cpu":"256m","memory":"256Mi"},'
        '"nodeSelector":{"a":"1","b":"\\u003cx\\u003e"},"name":"workers",'
        '"tolerations":[{"key":"k","operator":"Equal","value":"v","effect":"NoSchedule",'
        '"tolerationSeconds":5}],"minMember":2}]'
    )
    assert json.loads(groups)[1]["nodeSelector"]["b"] == "<x>"


# --- scheduler-plugins and KAI ---------------------------------------------------------------


def test_scheduler_plugins_pod_group_only_with_the_gang_key() -> None:
    objects = render(_cluster(), batch_scheduler="scheduler-plugins")
    assert not kinds(objects, "PodGroup")
    for pod in pods(objects):
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert bs.PLUGINS_POD_GROUP_LABEL not in pod["metadata"]["labels"]
    gang = render(
        _cluster(labels='"ray.io/gang-scheduling-enabled": "false"'),
        batch_scheduler="scheduler-plugins",
    )
    group = pod_group(gang)
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert group["metadata"]["name"] == "vc"
    assert group["spec"] == {"minMember": 3, "minResources": {"cpu": "768m", "memory": "768Mi"}}
    for pod in pods(gang):
        assert pod["metadata"]["labels"][bs.PLUGINS_POD_GROUP_LABEL] == "vc"


def test_kai_scheduler_metadata_and_missing_queue_warning() -> None:
    objects = render(
        _cluster(labels='"kai.scheduler/queue": team'), batch_scheduler="kai-scheduler"
    )
    assert not kinds(objects, "PodGroup")
    for pod in pods(objects):
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        assert pod["metadata"]["labels"][bs.KAI_QUEUE_LABEL] == "team"
    documents, _ = sources.parse_text(_cluster(), "test.yaml")
    result = compiler.render(documents, RenderOptions(batch_scheduler="kai-scheduler"))
    assert any("kai.scheduler/queue" in w.format() for w in result.warnings)
    # SidecarMode is fine under KAI; K8sJobMode is refused (tests/invalid).
    sidecar = render(
        _job("SidecarMode", labels='"kai.scheduler/queue": t'), batch_scheduler="kai-scheduler"
    )
    assert all(p["spec"]["schedulerName"] == "kai-scheduler" for p in pods(sidecar))


def test_refusals_name_the_combination() -> None:
    documents, _ = sources.parse_text(_job("K8sJobMode"), "test.yaml")
    with pytest.raises(ManifestError) as info:
        compiler.render(documents, RenderOptions(batch_scheduler="scheduler-plugins"))
    assert "scheduler-plugins does not support RayJob" in str(info.value.diagnostics[0].format())


# --- Kueue -----------------------------------------------------------------------------------


def test_kueue_group_counts_every_member() -> None:
    objects = render(_job("K8sJobMode"), kueue_queue="lq")
    members = pods(objects)
    assert len(members) == 4
    names = set()
    for pod in members:
        meta = pod["metadata"]
        assert meta["labels"][bs.KUEUE_QUEUE_LABEL] == "lq"
        assert meta["annotations"][bs.KUEUE_TOTAL_COUNT] == "4"
        names.add(meta["labels"][bs.KUEUE_GROUP_LABEL])
    assert len(names) == 1
    # HTTPMode: no submitter pod, so the group is the cluster alone.
    http = pods(render(_job("HTTPMode"), kueue_queue="lq"))
    assert {p["metadata"]["annotations"][bs.KUEUE_TOTAL_COUNT] for p in http} == {"3"}


def test_kueue_manifest_label_wins_and_serving_generations_are_marked() -> None:
    objects = render(_cluster(labels='"kueue.x-k8s.io/queue-name": own'), kueue_queue="lq")
    assert {p["metadata"]["labels"][bs.KUEUE_QUEUE_LABEL] for p in pods(objects)} == {"own"}
    assert not kinds(render(_cluster()), "PodGroup")
    assert all(
        bs.KUEUE_QUEUE_LABEL not in p["metadata"]["labels"] for p in pods(render(_cluster()))
    )


def test_kueue_combines_with_a_batch_scheduler() -> None:
    objects = render(_cluster(), kueue_queue="lq", batch_scheduler="volcano")
    assert pod_group(objects)["spec"]["minMember"] == 3
    for pod in pods(objects):
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"][bs.KUEUE_TOTAL_COUNT] == "3"


# --- the CLI switch --------------------------------------------------------------------------


def test_cli_flags(tmp_path: Any) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(_cluster())
    both = CliRunner().invoke(
        main, ["render", str(path), "--enable-batch-scheduler", "--batch-scheduler", "volcano"]
    )
    assert both.exit_code == 2
    assert (
        "both feature flags enable-batch-scheduler (deprecated) and batch-scheduler are set. "
        "Please use batch-scheduler only" in both.stderr
    )
    legacy = CliRunner().invoke(main, ["render", str(path), "--enable-batch-scheduler"])
    modern = CliRunner().invoke(main, ["render", str(path), "--batch-scheduler", "volcano"])
    assert legacy.exit_code == 0 and legacy.stdout == modern.stdout
    assert "kind: PodGroup" in legacy.stdout
    unknown = CliRunner().invoke(main, ["render", str(path), "--batch-scheduler", "slurm"])
    assert unknown.exit_code == 2


# --- Go's Quantity arithmetic ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fmt", "text"),
    [
        (Fraction(768, 1000), DECIMAL_SI, "768m"),
        (Fraction(1268, 1000), DECIMAL_SI, "1268m"),
        (Fraction(968 * 2**20), BINARY_SI, "968Mi"),
        (Fraction(4296 * 2**20), BINARY_SI, "4296Mi"),
        (Fraction(2000), DECIMAL_SI, "2k"),
        (Fraction(1500), DECIMAL_SI, "1500"),
        (Fraction(1000), BINARY_SI, "1k"),  # binary under 1024 prints as decimal
        (Fraction(3, 2) * 2**30, BINARY_SI, "1536Mi"),
        (Fraction(1, 2), BINARY_SI, "500m"),
        (Fraction(0), BINARY_SI, "0"),
    ],
)
def test_go_quantity_strings(value: Fraction, fmt: str, text: str) -> None:
    assert format_quantity(value, fmt) == text


def test_pod_resources_requests_win_and_the_first_format_stays() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"memory": "1Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}},
            {"resources": {"requests": {"memory": "1000000", "cpu": "0.5"}}},
        ]
    }
    # 1Gi + 1e6 bytes is not a whole Mi: Go prints the BinarySI sum with the bytes suffix "".
    assert resource_list(pod_resources(spec)) == {"cpu": "2500m", "memory": "1074741824"}


def test_kai_pod_groups_are_opt_in_and_name_every_pod() -> None:
    labels = '"kai.scheduler/queue": team'
    plain = render(_cluster(labels=labels), batch_scheduler="kai-scheduler")
    assert not kinds(plain, "PodGroup")
    objects = render(_cluster(labels=labels), batch_scheduler="kai-scheduler", kai_podgroups=True)
    group = pod_group(objects)
    assert group["apiVersion"] == "scheduling.run.ai/v2alpha2"
    assert group["spec"]["minMember"] == 3
    assert group["spec"]["queue"] == "team"
    assert set(group["spec"]) == {"minMember", "queue", "subGroups"}
    subgroups = {g["name"]: g["minMember"] for g in group["spec"]["subGroups"]}
    assert subgroups == {"headgroup": 1, "workers": 2}
    for pod in pods(objects):
        assert pod["metadata"]["annotations"][bs.KAI_POD_GROUP_ANNOTATION] == "pg-vc"
        assert pod["metadata"]["labels"][bs.KAI_SUBGROUP_LABEL] in subgroups
        assert "ownerReferences" not in pod["metadata"]  # what KAI's orphan rule needs


def test_kueue_marks_rayservice_generations_as_serving() -> None:
    text = f"""
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: svc
  labels: {{"kueue.x-k8s.io/queue-name": serve-q}}
spec:
  serveConfigV2: |
    applications: []
  rayClusterConfig:
    headGroupSpec:
      template:
        spec:{POD_256.format(name="ray-head")}
"""
    members = pods(render(text))
    assert len(members) == 1
    meta = members[0]["metadata"]
    assert meta["annotations"][bs.KUEUE_SERVING] == "true"
    assert meta["annotations"][bs.KUEUE_TOTAL_COUNT] == "1"
    assert meta["labels"][bs.KUEUE_GROUP_LABEL] == meta["labels"]["ray.io/cluster"]


def _warnings(text: str, **options: Any) -> list[str]:
    documents, _ = sources.parse_text(text, "test.yaml")
    result = compiler.render(documents, RenderOptions(**options))
    return [w.format() for w in result.warnings]


def test_kueue_warns_about_a_job_that_never_releases_its_quota() -> None:
    keeps = _job("HTTPMode").replace("  shutdownAfterJobFinishes: true\n", "")
    assert any("shutdownAfterJobFinishes" in w for w in _warnings(keeps, kueue_queue="lq"))
    assert not _warnings(_job("HTTPMode"), kueue_queue="lq")
    assert not _warnings(keeps)  # no queue: not Kueue's business


def test_kueue_warns_beyond_eighteen_pod_shapes() -> None:
    group = _cluster().split("  workerGroupSpecs:\n")[1]
    many = _cluster().split("  workerGroupSpecs:\n")[0] + "  workerGroupSpecs:\n"
    many += "".join(group.replace("workers", f"w{i}") for i in range(17))
    assert not _warnings(many, kueue_queue="lq")  # head + 17 groups = 18
    more = many + group.replace("workers", "w17")
    assert any("at most 18 pod shapes" in w for w in _warnings(more, kueue_queue="lq"))
