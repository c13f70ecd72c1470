"""The in-memory dashboard behaves like the Ray 2.60 head that tests/e2e checks."""

from __future__ import annotations

import pytest

from syncer.errors import NotFoundError, PermanentError, TransientError
from syncer.ray.types import Dashboard, replica_state_counts
from tests.syncer.fakedashboard import (
    GHOST_ENTRYPOINT,
    AppPlan,
    FakeDashboard,
    JobPlan,
    ManualClock,
    target_replicas,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000.0)


@pytest.fixture
def fake(clock: ManualClock) -> FakeDashboard:
    return FakeDashboard(clock)


def status_of(fake: FakeDashboard, submission_id: str) -> str:
    job = fake.get_job(submission_id)
    assert job is not None
    return job["status"]


def test_fake_satisfies_the_dashboard_protocol(fake: FakeDashboard) -> None:
    dashboard: Dashboard = fake
    assert dashboard.version()["ray_version"] == "2.60.0"
    assert dashboard.is_healthy() is True


def test_job_moves_pending_running_succeeded_on_the_clock(
    fake: FakeDashboard, clock: ManualClock
) -> None:
    fake.plan_job("j", JobPlan(pending_s=1.0, running_s=2.0, logs="hi\n"))
    assert fake.submit_job("j", "python x.py", metadata={"a": "b"}) is True
    job = fake.get_job("j")
    assert job is not None
    assert (job["status"], job["start_time"], job["end_time"]) == ("PENDING", 1_000_000, None)
    assert job["metadata"] == {"a": "b"}
    assert fake.get_job_logs("j") == ""
    clock.advance(1.0)
    job = fake.get_job("j")
    assert job is not None
    assert (job["status"], job["message"]) == ("RUNNING", "Job is currently running.")
    clock.advance(2.0)
    job = fake.get_job("j")
    assert job is not None
    assert job["status"] == "SUCCEEDED"
    assert job["message"] == "Job finished successfully."
    assert (job["end_time"], job["driver_exit_code"], job["error_type"]) == (1_003_000, 0, None)
    assert fake.get_job_logs("j") == "Running entrypoint for job j: python x.py\nhi\n"


def test_failed_job_carries_exit_code_and_logs(fake: FakeDashboard) -> None:
    fake.plan_job("f", JobPlan(outcome="FAILED", exit_code=3, logs="boom\n"))
    fake.submit_job("f", "python fail.py")
    fake.advance(5)
    job = fake.get_job("f")
    assert job is not None
    assert (job["status"], job["error_type"]) == ("FAILED", "JOB_ENTRYPOINT_COMMAND_ERROR")
    assert job["driver_exit_code"] == 3
    assert job["message"] is not None
    assert job["message"].startswith("Job entrypoint command failed with exit code 3")
    assert job["message"].endswith("boom\n")


def test_resubmission_is_idempotent_and_calls_are_counted(fake: FakeDashboard) -> None:
    assert fake.submit_job("j", "a") is True
    assert fake.submit_job("j", "b") is False
    assert [job["entrypoint"] for job in fake.list_jobs()] == ["a"]
    assert fake.calls == {"submit_job": 2, "list_jobs": 1}


def test_stop_ends_a_running_job_after_the_stop_delay(fake: FakeDashboard) -> None:
    fake.plan_job("long", JobPlan(running_s=None, stop_s=1.2))
    fake.submit_job("long", "sleep")
    fake.advance(2)
    with pytest.raises(TransientError, match="non-terminal state RUNNING") as refused:
        fake.delete_job("long")
    assert refused.value.status == 500
    assert fake.stop_job("long") is True
    fake.advance(1.0)
    assert status_of(fake, "long") == "RUNNING"
    fake.advance(0.2)
    job = fake.get_job("long")
    assert job is not None
    assert (job["status"], job["message"]) == ("STOPPED", "Job was intentionally stopped.")
    assert job["driver_exit_code"] is None
    assert fake.stop_job("long") is False


def test_job_pending_on_resources_ignores_stop_until_the_start_timeout(
    fake: FakeDashboard,
) -> None:
    fake.plan_job("big", JobPlan(pending_s=None, start_timeout_s=10))
    fake.submit_job("big", "train", entrypoint_num_cpus=64)
    assert fake.stop_job("big") is True
    fake.advance(9.9)
    job = fake.get_job("big")
    assert job is not None
    assert job["status"] == "PENDING"
    assert job["message"] is not None
    assert "waiting for resources" in job["message"]
    fake.advance(0.1)
    job = fake.get_job("big")
    assert job is not None
    assert (job["status"], job["error_type"]) == ("FAILED", "JOB_SUPERVISOR_ACTOR_START_TIMEOUT")


def test_quick_delete_leaves_a_ghost_that_a_second_delete_removes(clock: ManualClock) -> None:
    fake = FakeDashboard(clock, ghost_on_quick_delete=True)
    fake.submit_job("quick", "x")
    fake.submit_job("late", "x")
    clock.advance(1.2)  # both ended at +1.2 s
    assert fake.delete_job("quick") is True
    ghost = fake.get_job("quick")
    assert ghost is not None
    assert (ghost["status"], ghost["entrypoint"]) == ("FAILED", GHOST_ENTRYPOINT)
    assert ghost["error_type"] == "JOB_SUPERVISOR_ACTOR_DIED"
    assert fake.delete_job("quick") is True
    assert fake.get_job("quick") is None
    clock.advance(1.0)
    assert fake.delete_job("late") is True
    assert fake.get_job("late") is None


def test_unknown_jobs_and_listing_order(fake: FakeDashboard) -> None:
    fake.submit_job("b", "x")
    fake.advance(1)
    fake.submit_job("a", "x")
    assert [job["submission_id"] for job in fake.list_jobs()] == ["b", "a"]
    assert fake.get_job("nope") is None
    assert fake.delete_job("nope") is False
    with pytest.raises(NotFoundError, match="Job nope does not exist"):
        fake.stop_job("nope")
    with pytest.raises(NotFoundError):
        fake.get_job_logs("nope")


def test_injected_failures_and_an_unreachable_head(fake: FakeDashboard) -> None:
    fake.fail_next("get_job", TransientError("503", status=503), times=2)
    for _ in range(2):
        with pytest.raises(TransientError):
            fake.get_job("x")
    assert fake.get_job("x") is None
    fake.available = False
    with pytest.raises(TransientError, match="refused"):
        fake.list_jobs()
    assert fake.is_healthy() is False
    assert fake.calls["get_job"] == 3
    fake.available = True
    fake.restart()
    assert fake.list_jobs() == []


def test_serve_apps_deploy_scale_and_delete(fake: FakeDashboard) -> None:
    assert fake.get_serve_details()["applications"] == {}
    fake.plan_app("broken", AppPlan(deploy_s=10, outcome="DEPLOY_FAILED", message="No module"))
    config = {
        "proxy_location": "HeadOnly",
        "applications": [
            {
                "name": "greet",
                "route_prefix": "/greet",
                "import_path": "greet:app",
                "deployments": [{"name": "Greeter", "num_replicas": 4}],
            },
            {"name": "echo", "route_prefix": "/echo", "import_path": "echo:build"},
            {"name": "broken", "route_prefix": "/broken", "import_path": "nope:app"},
        ],
    }
    fake.put_serve_applications(config, target_capacity=50)
    apps = fake.get_serve_details()["applications"]
    assert {name: app["status"] for name, app in apps.items()} == dict.fromkeys(
        ("greet", "echo", "broken"), "DEPLOYING"
    )
    assert apps["greet"]["deployments"] == {}
    fake.advance(5)
    details = fake.get_serve_details()
    assert details["target_capacity"] == 50.0
    assert details["proxy_location"] == "HeadOnly"
    greeter = details["applications"]["greet"]["deployments"]["Greeter"]
    assert (greeter["status"], greeter["target_num_replicas"]) == ("HEALTHY", 2)
    assert replica_state_counts(greeter) == {"RUNNING": 2}
    assert list(details["applications"]["echo"]["deployments"]) == ["build"]
    assert details["applications"]["broken"]["status"] == "DEPLOYING"
    fake.advance(5)
    broken = fake.get_serve_details()["applications"]["broken"]
    assert (broken["status"], broken["message"]) == ("DEPLOY_FAILED", "No module")

    fake.put_serve_applications(config, target_capacity=100)
    greet = fake.get_serve_details()["applications"]["greet"]
    assert greet["status"] == "RUNNING"  # unchanged apps are not redeployed
    assert greet["deployments"]["Greeter"]["status"] == "UPSCALING"
    fake.advance(2)
    greeter = fake.get_serve_details()["applications"]["greet"]["deployments"]["Greeter"]
    assert (greeter["status"], len(greeter["replicas"])) == ("HEALTHY", 4)

    with pytest.raises(PermanentError, match="less than or equal to 100") as invalid:
        fake.put_serve_applications(config, target_capacity=150)
    assert invalid.value.status == 400

    fake.put_serve_applications({"applications": config["applications"][:1]})
    apps = fake.get_serve_details()["applications"]
    assert (apps["echo"]["status"], apps["broken"]["status"]) == ("DELETING", "DELETING")
    fake.advance(1)
    assert list(fake.get_serve_details()["applications"]) == ["greet"]
    assert fake.get_serve_details()["target_capacity"] is None

    fake.delete_serve_applications()
    assert fake.get_serve_details()["controller_actor"] is None
    assert len(fake.put_bodies) == 3


@pytest.mark.parametrize(
    ("replicas", "capacity", "expected"),
    [(4, 50, 2), (2, 50, 1), (1, 50, 1), (3, 50, 2), (4, 0, 0), (4, None, 4), (4, 100, 4)],
)
def test_target_replicas_follows_serve_rounding(
    replicas: int, capacity: float | None, expected: int
) -> None:
    assert target_replicas(replicas, capacity) == expected


def test_advance_needs_the_fake_clock() -> None:
    fake = FakeDashboard(lambda: 5.0)
    with pytest.raises(TypeError):
        fake.advance(1)
