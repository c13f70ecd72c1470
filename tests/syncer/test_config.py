"""The syncer config: defaults, every problem at once, compiler-style locations."""

from __future__ import annotations

from pathlib import Path

import pytest

from renderer.errors import format_path
from syncer.config import (
    Config,
    ConfigError,
    LeaderElection,
    format_config_errors,
    load_config,
    parse_config,
    restart_required,
)


def problems(text: str) -> list[tuple[str, str]]:
    config, diagnostics = parse_config(text, "config.yaml")
    assert config is None, "expected the config to be rejected"
    return [(format_path(d.problem.path), d.problem.message) for d in diagnostics]


def parsed(text: str) -> Config:
    config, diagnostics = parse_config(text, "config.yaml")
    assert not diagnostics, format_config_errors(diagnostics)
    assert config is not None
    return config


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n", "---\n"])
def test_an_empty_config_gives_kuberay_defaults(text: str) -> None:
    config = parsed(text)
    assert config == Config()
    assert config.poll_interval_s == 3.0
    assert config.dashboard_timeout_s == 2.0
    assert config.submitter_finished_timeout_s == 30.0
    assert config.transition_grace_period_s == 300.0
    assert config.status_check_timeout_s == 300.0
    assert config.ttl_mode == "stop"
    assert config.label_selector == "app.kubernetes.io/managed-by=kuberay-render"
    assert config.leader_election == LeaderElection(
        enabled=True,
        lease_name="kuberay-syncer",
        lease_namespace=None,
        lease_duration_s=15.0,
        renew_deadline_s=10.0,
        retry_period_s=2.0,
    )
    assert (config.health_port, config.metrics_port) == (8081, 8080)


def test_every_field_is_read() -> None:
    config = parsed(
        """\
namespaces: [ml, data]
label_selector: "app.kubernetes.io/managed-by=kuberay-render,team in (a, b)"
poll_interval_s: 1.5
idle_resync_s: 60
dashboard_timeout_s: 10
dashboard_budget_rps: 50
dashboard_concurrency: 4
ttl_mode: delete
dashboard_auth_secret: ray-token
submitter_finished_timeout_s: 0
transition_grace_period_s: 0
status_check_timeout_s: 120
leader_election:
  enabled: false
  lease_name: my-lease
  lease_namespace: infra
  lease_duration_s: 30
  renew_deadline_s: 20
  retry_period_s: 4
health_port: 9001
metrics_port: 9002
bind_address: "::"
log_level: debug
work_queue_limit: 10
rayservice_progress_deadline_s: 600
cluster_domain: corp.example
"""
    )
    assert config == Config(
        namespaces=("ml", "data"),
        label_selector="app.kubernetes.io/managed-by=kuberay-render,team in (a, b)",
        poll_interval_s=1.5,
        idle_resync_s=60.0,
        dashboard_timeout_s=10.0,
        dashboard_budget_rps=50.0,
        dashboard_concurrency=4,
        ttl_mode="delete",
        dashboard_auth_secret="ray-token",
        submitter_finished_timeout_s=0.0,
        transition_grace_period_s=0.0,
        status_check_timeout_s=120.0,
        leader_election=LeaderElection(False, "my-lease", "infra", 30.0, 20.0, 4.0),
        health_port=9001,
        metrics_port=9002,
        bind_address="::",
        log_level="DEBUG",
        work_queue_limit=10,
        rayservice_progress_deadline_s=600.0,
        cluster_domain="corp.example",
    )
    assert isinstance(config.idle_resync_s, float)


def test_a_bad_config_is_shown_compiler_style_with_lines_and_a_total() -> None:
    text = "namespaces: [ml]\npoll_interval_s: fast\npollInterval: 3\n"
    config, diagnostics = parse_config(text, "cfg/config.yaml")
    assert config is None
    assert format_config_errors(diagnostics) == (
        "cfg/config.yaml:2:18: error: $.poll_interval_s: expected a number greater than 0 "
        '(seconds), got "fast"\n'
        "  in document 1 (syncer config)\n"
        'cfg/config.yaml:3:15: error: $.pollInterval: unknown field "pollInterval"; '
        'did you mean "poll_interval_s"?\n'
        "  in document 1 (syncer config)\n"
        "2 errors in the syncer config"
    )


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        """\
namespaces: [ml, Bad_NS, ml]
ttl_mode: nuke
log_level: verbose
dashboard_concurrency: 0
health_port: 70000
bind_address: localhost
dashboard_auth_secret: "Not A Name"
idle_resync_s: true
work_queue_limit: 1.5
rayservice_progress_deadline_s: -1
cluster_domain: "bad domain"
leader_election:
  enabeld: true
"""
    )
    assert found == [
        ("$.namespaces[1]", 'expected a namespace name, got "Bad_NS"'),
        ("$.namespaces[2]", 'duplicate namespace "ml"'),
        ("$.ttl_mode", 'expected "stop" or "delete", got "nuke"'),
        ("$.dashboard_auth_secret", 'expected a Secret name, got "Not A Name"'),
        ("$.bind_address", 'expected an IP address, got "localhost"'),
        (
            "$.log_level",
            'expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got "verbose"',
        ),
        ("$.cluster_domain", 'expected a DNS domain, got "bad domain"'),
        ("$.health_port", "expected an integer from 0 to 65535, got 70000"),
        ("$.idle_resync_s", "expected a number greater than 0 (seconds), got true"),
        ("$.dashboard_concurrency", "expected an integer of at least 1, got 0"),
        ("$.leader_election.enabeld", 'unknown field "enabeld"; did you mean "enabled"?'),
        ("$.work_queue_limit", "expected an integer of at least 1, got 1.5"),
        ("$.rayservice_progress_deadline_s", "expected a number greater than 0, got -1"),
    ]


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        ("poll_interval_s: 0\n", "$.poll_interval_s", "expected a number greater than 0, got 0"),
        (
            "transition_grace_period_s: -1\n",
            "$.transition_grace_period_s",
            "expected a number of at least 0, got -1",
        ),
        (
            "status_check_timeout_s: .inf\n",
            "$.status_check_timeout_s",
            "expected a number greater than 0 (seconds), got Infinity",
        ),
        ("namespaces: ml\n", "$.namespaces", 'expected a list of strings, got "ml"'),
        ("namespaces: [1]\n", "$.namespaces[0]", "expected a non-empty string, got 1"),
        (
            "namespaces: ['*', ml]\n",
            "$.namespaces",
            '"*" (all namespaces) must be alone',
        ),
        ("label_selector: ''\n", "$.label_selector", 'expected a non-empty string, got ""'),
        ("leader_election: yes\n", "$.leader_election", "expected a mapping, got true"),
        (
            "leader_election: {enabled: 1}\n",
            "$.leader_election.enabled",
            "expected true or false, got 1",
        ),
        (
            "leader_election: {lease_name: Bad_Name}\n",
            "$.leader_election.lease_name",
            'expected a Kubernetes object name, got "Bad_Name"',
        ),
        (
            "leader_election: {lease_namespace: ''}\n",
            "$.leader_election.lease_namespace",
            'expected a non-empty string or null, got ""',
        ),
        (
            "leader_election: {lease_duration_s: 5}\n",
            "$.leader_election.lease_duration_s",
            "expected more than renew_deadline_s (10), got 5",
        ),
        (
            "leader_election: {renew_deadline_s: 20}\n",
            "$.leader_election.renew_deadline_s",
            "expected less than lease_duration_s (15), got 20",
        ),
        (
            "leader_election: {retry_period_s: 9}\n",
            "$.leader_election.retry_period_s",
            "expected renew_deadline_s (10) to exceed 1.2 times retry_period_s (9)",
        ),
        (
            "health_port: 9000\nmetrics_port: 9000\n",
            "$.metrics_port",
            "expected a port other than health_port (9000)",
        ),
        ("42\n", "$", "expected a mapping of settings, got 42"),
    ],
)
def test_single_problems(text: str, path: str, message: str) -> None:
    assert problems(text) == [(path, message)]


@pytest.mark.parametrize(
    "selector",
    [
        "app.kubernetes.io/managed-by=kuberay-render",
        "app.kubernetes.io/managed-by==kuberay-render,team=ml",
        "app.kubernetes.io/managed-by in (kuberay-render), tier notin (a,b), !legacy, owner",
    ],
)
def test_label_selectors_that_keep_the_renderer_label_are_accepted(selector: str) -> None:
    assert parsed(f"label_selector: {selector!r}\n").label_selector == selector


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (
            "team=ml",
            "the selector must require app.kubernetes.io/managed-by=kuberay-render: the syncer "
            "acts only on objects the renderer made",
        ),
        (
            "app.kubernetes.io/managed-by!=kuberay-render",
            "the selector must require app.kubernetes.io/managed-by=kuberay-render: the syncer "
            "acts only on objects the renderer made",
        ),
        (
            "app.kubernetes.io/managed-by in (kuberay-render, other)",
            "the selector must require app.kubernetes.io/managed-by=kuberay-render: the syncer "
            "acts only on objects the renderer made",
        ),
        (
            "app.kubernetes.io/managed-by=kuberay-render,,",
            '"" is not a label selector requirement',
        ),
        (
            "app.kubernetes.io/managed-by=kuberay-render,bad key=x",
            '"bad key=x" is not a label selector requirement',
        ),
        (
            "app.kubernetes.io/managed-by=kuberay-render,team=-x-",
            '"team=-x-" has an invalid label value',
        ),
    ],
)
def test_bad_label_selectors_are_rejected(selector: str, message: str) -> None:
    assert problems(f"label_selector: {selector!r}\n") == [("$.label_selector", message)]


def test_invalid_yaml_is_located_and_named_as_the_syncer_config() -> None:
    config, diagnostics = parse_config("poll_interval_s: [1\n", "config.yaml")
    assert config is None
    assert len(diagnostics) == 1
    text = diagnostics[0].format()
    assert text.startswith("config.yaml:2:1: error: $: invalid YAML: ")
    assert text.endswith("in document 1 (syncer config)")


def test_duplicate_keys_are_invalid_yaml() -> None:
    config, diagnostics = parse_config("poll_interval_s: 1\npoll_interval_s: 2\n", "c.yaml")
    assert config is None
    assert "duplicate key 'poll_interval_s'" in diagnostics[0].problem.message


def test_a_second_document_is_an_error() -> None:
    config, diagnostics = parse_config("poll_interval_s: 1\n---\nttl_mode: stop\n", "c.yaml")
    assert config is None
    assert [d.format() for d in diagnostics] == [
        "c.yaml:3:1: error: $: expected one YAML document, got 2\n  in document 2 (syncer config)"
    ]


def test_null_sections_and_optional_values_mean_the_defaults() -> None:
    config = parsed(
        "leader_election: null\ndashboard_auth_secret: null\nrayservice_progress_deadline_s: null\n"
    )
    assert config == Config()
    assert parsed("leader_election: {lease_namespace: null}\n") == Config()


def test_a_bad_lease_namespace_is_reported() -> None:
    assert problems("leader_election: {lease_namespace: Infra_NS}\n") == [
        ("$.leader_election.lease_namespace", 'expected a namespace name, got "Infra_NS"')
    ]


def test_namespace_helpers() -> None:
    assert Config().watched_namespaces("kuberay-system") == ("kuberay-system",)
    assert Config(namespaces=("a", "b")).watched_namespaces("x") == ("a", "b")
    everything = parsed("namespaces: ['*']\n")
    assert everything.watches_all_namespaces
    assert everything.watched_namespaces("x") is None
    assert Config().lease_namespace("own") == "own"
    assert Config(leader_election=LeaderElection(lease_namespace="le")).lease_namespace("x") == "le"


def test_restart_required_names_only_fields_read_at_start() -> None:
    old = Config()
    new = Config(poll_interval_s=1.0, metrics_port=9999, namespaces=("a",))
    assert restart_required(old, new) == ("namespaces", "metrics_port")
    assert restart_required(old, Config(poll_interval_s=1.0)) == ()


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("ttl_mode: delete\n", encoding="utf-8")
    assert load_config(path) == Config(ttl_mode="delete")
    assert load_config(str(path)) == Config(ttl_mode="delete")


def test_load_config_raises_with_every_diagnostic(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("ttl_mode: x\nfoo: 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert len(caught.value.diagnostics) == 2
    assert str(caught.value).endswith("2 errors in the syncer config")
    assert f"{path}:1:11: error: $.ttl_mode:" in str(caught.value)


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:1:1: error: $: cannot read the config file: ")
    assert message.endswith("1 error in the syncer config")
