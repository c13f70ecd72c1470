"""`kuberay status` reads the status ConfigMaps the syncer publishes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from renderer.cli import main
from syncer.kube.client import CONFIGMAPS, KubeClient
from tests.fakeapi.fixtures import KubeApi


def publish(
    kube: KubeClient, namespace: str, name: str, status: dict[str, object], attempt: int = 0
) -> None:
    kube.create(
        CONFIGMAPS,
        namespace,
        {
            "metadata": {
                "name": f"{name}-kuberay-status",
                "labels": {
                    "app.kubernetes.io/managed-by": "kuberay-syncer",
                    "kuberay.io/role": "status",
                    "kuberay.io/origin-kind": "RayJob",
                    "kuberay.io/origin-name": name,
                },
            },
            "data": {"status.json": json.dumps({"status": status, "syncer": {"attempt": attempt}})},
        },
    )


def test_status_lists_jobs_as_a_table(kube_api: KubeApi) -> None:
    kube = KubeClient(kube_api.api_client)
    ns = kube_api.namespace
    publish(
        kube,
        ns,
        "train",
        {
            "jobDeploymentStatus": "Running",
            "jobStatus": "RUNNING",
            "startTime": "2026-11-30T00:00:00Z",
        },
    )
    publish(
        kube,
        ns,
        "eval",
        {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed"},
        attempt=2,
    )
    result = CliRunner().invoke(
        main, ["status", "-n", ns, "--kubeconfig", str(kube_api.kubeconfig)]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "NAMESPACE",
        "NAME",
        "KIND",
        "DEPLOYMENT",
        "JOB",
        "STATUS",
        "ATTEMPT",
        "START",
        "END",
        "REASON",
    ]
    assert lines[1].split() == [ns, "eval", "RayJob", "Failed", "FAILED", "2", "AppFailed"]
    assert lines[2].split()[:5] == [ns, "train", "RayJob", "Running", "RUNNING"]


def test_status_of_one_job_prints_its_status(kube_api: KubeApi) -> None:
    kube = KubeClient(kube_api.api_client)
    ns = kube_api.namespace
    publish(kube, ns, "train", {"jobDeploymentStatus": "Complete", "succeeded": 1})
    result = CliRunner().invoke(
        main, ["status", f"{ns}/train", "--kubeconfig", str(kube_api.kubeconfig)]
    )
    assert result.exit_code == 0, result.output
    assert "jobDeploymentStatus: Complete" in result.stdout
    missing = CliRunner().invoke(
        main, ["status", f"{ns}/nope", "--kubeconfig", str(kube_api.kubeconfig)]
    )
    assert missing.exit_code == 1
    assert "no status published" in missing.stderr


def test_gc_lists_finished_jobs_only(kube_api: KubeApi) -> None:
    kube = KubeClient(kube_api.api_client)
    ns = kube_api.namespace
    publish(kube, ns, "running", {"jobDeploymentStatus": "Running"})
    publish(
        kube, ns, "done", {"jobDeploymentStatus": "Complete", "endTime": "2026-11-30T01:00:00Z"}
    )
    result = CliRunner().invoke(main, ["gc", "-n", ns, "--kubeconfig", str(kube_api.kubeconfig)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "KIND", "NAME", "WHY"]
    assert len(lines) == 2
    assert lines[1].split()[:4] == [ns, "RayJob", "done", "complete"]


def test_gc_ignores_status_maps_the_syncer_did_not_label_or_name(kube_api: KubeApi) -> None:
    kube = KubeClient(kube_api.api_client)
    ns = kube_api.namespace
    done = {"jobDeploymentStatus": "Complete", "endTime": "2026-11-30T01:00:00Z"}
    for name, labels in (
        ("bare-kuberay-status", {}),  # no managed-by: not the syncer's
        ("other-kuberay-status", {"app.kubernetes.io/managed-by": "kuberay-syncer"}),
    ):
        kube.create(
            CONFIGMAPS,
            ns,
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        **labels,
                        "kuberay.io/role": "status",
                        "kuberay.io/origin-kind": "RayJob",
                        "kuberay.io/origin-name": "victim",  # not the map's own name
                    },
                },
                "data": {"status.json": json.dumps({"status": done})},
            },
        )
    result = CliRunner().invoke(main, ["gc", "-n", ns, "--kubeconfig", str(kube_api.kubeconfig)])
    assert result.exit_code == 0, result.output
    assert (
        result.stdout.splitlines() == ["NAMESPACE  KIND  NAME  WHY"]
        or len(result.stdout.splitlines()) == 1
    )


def test_status_shows_a_rayservice_upgrade(kube_api: KubeApi) -> None:
    kube = KubeClient(kube_api.api_client)
    ns = kube_api.namespace
    kube.create(
        CONFIGMAPS,
        ns,
        {
            "metadata": {
                "name": "fruit-kuberay-status",
                "labels": {
                    "app.kubernetes.io/managed-by": "kuberay-syncer",
                    "kuberay.io/role": "status",
                    "kuberay.io/origin-kind": "RayService",
                    "kuberay.io/origin-name": "fruit",
                },
            },
            "data": {
                "status.json": json.dumps(
                    {
                        "status": {
                            "serviceStatus": "Running",
                            "activeServiceStatus": {"rayClusterName": "fruit-aaaaa"},
                            "pendingServiceStatus": {"rayClusterName": "fruit-bbbbb"},
                        }
                    }
                )
            },
        },
    )
    result = CliRunner().invoke(
        main, ["status", "-n", ns, "--kubeconfig", str(kube_api.kubeconfig)]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].split()[:6] == [
        ns,
        "fruit",
        "RayService",
        "Running",
        "fruit-aaaaa",
        "->",
    ]


def test_status_lists_clusters_like_kubectl_get_raycluster(kube_api: KubeApi) -> None:
    kube = KubeClient(kube_api.api_client)
    ns = kube_api.namespace
    publish(kube, ns, "train", {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"})
    kube.create(
        CONFIGMAPS,
        ns,
        {
            "metadata": {
                "name": "gpu-pool-kuberay-status",
                "labels": {
                    "app.kubernetes.io/managed-by": "kuberay-syncer",  # only the syncer's maps
                    "kuberay.io/role": "status",
                    "kuberay.io/origin-kind": "RayCluster",
                    "kuberay.io/origin-name": "gpu-pool",
                },
            },
            "data": {
                "status.json": json.dumps(
                    {
                        "status": {
                            "state": "ready",
                            "desiredWorkerReplicas": 3,
                            "availableWorkerReplicas": 2,
                            "desiredCPU": "13",
                            "desiredMemory": "52Gi",
                            "desiredGPU": "3",
                        }
                    }
                )
            },
        },
    )
    result = CliRunner().invoke(
        main, ["status", "-n", ns, "--kubeconfig", str(kube_api.kubeconfig)]
    )
    assert result.exit_code == 0, result.output
    jobs, clusters = result.stdout.split("\n\n")
    assert [line.split()[1] for line in jobs.splitlines()[1:]] == ["train"]
    header, *rows = clusters.splitlines()
    assert header.split() == (
        [
            "NAMESPACE",
            "NAME",
            "DESIRED",
            "WORKERS",
            "AVAILABLE",
            "WORKERS",
            "CPUS",
            "MEMORY",
            "GPUS",
            "STATUS",
            "AGE",
        ]
    )
    (only,) = rows
    cells = only.split()
    assert cells[:8] == [ns, "gpu-pool", "3", "2", "13", "52Gi", "3", "ready"]
    assert cells[8].endswith("s")  # just created
