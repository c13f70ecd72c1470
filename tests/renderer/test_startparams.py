"""rayStartParams derived from resources (raycluster.md §2.4.2-§2.4.3), edge cases included."""

from __future__ import annotations

from typing import Any

import pytest

from renderer.objects import startparams

HUGE = "1" * 20 + "e300"  # a valid quantity whose float64 is +Inf


def group(resources: dict[str, Any]) -> dict[str, str]:
    params: dict[str, str] = {}
    startparams.apply_group_resources(params, resources)
    return params


def inferred(limits: dict[str, Any], params: dict[str, str] | None = None) -> dict[str, str]:
    params = dict(params or {})
    startparams.apply_container_resources(params, {"resources": {"limits": limits}})
    return params


def test_group_resources_skip_values_that_are_not_quantities() -> None:
    # §2.4.3: "Every value is parsed as a Kubernetes quantity (unparseable values are skipped)".
    assert group({"cpu": "lots", "custom": "2"}) == {"resources": "'{\"custom\":2}'"}


def test_group_resources_are_parsed_without_trimming() -> None:
    # KubeRay calls resource.ParseQuantity on the map value itself, which refuses spaces.
    assert group({"cpu": " 2", "custom": "1 "}) == {}


def test_group_resources_custom_values_are_go_float64s() -> None:
    # §2.4.3: "any other key (original case) goes into a JSON map as a float", the float
    # being Quantity.AsApproximateFloat64: 0.3 is stored as 3 * 10^-1.
    assert group({"Custom": "0.3", "half": "500m"}) == {
        "resources": '\'{"Custom":0.30000000000000004,"half":0.5}\''
    }


def test_group_resources_with_an_infinite_custom_value_set_no_resources_flag() -> None:
    # Go's json.Marshal refuses +Inf; KubeRay logs it and leaves `resources` unset, while the
    # CPU flag derived in the same loop stays.
    assert group({"cpu": "2", "custom": HUGE}) == {"num-cpus": "2"}


@pytest.mark.parametrize(
    "existing",
    [
        "'[1, 2]'",  # JSON, but not an object
        '\'{"a": "1"}\'',  # a string value
        "'{\"a\": true}'",  # a boolean value
        "'{\"a\": NaN}'",  # Python's json reads NaN; Go's does not
        "'{\"a\": 1e999}'",  # out of float64 range: Go fails, Python reads inf
        "'{not json}'",
    ],
)
def test_undecodable_resources_param_disables_gpu_and_accelerator_inference(existing: str) -> None:
    # §2.4.2: "If decoding fails, an error is logged and neither num-gpus nor accelerator
    # resources are inferred."
    params = {"resources": existing}
    assert inferred({"nvidia.com/gpu": 1, "google.com/tpu": 4}, params) == params


def test_existing_tpu_resource_stops_accelerator_inference() -> None:
    # §2.4.2: "If the decoded map already has TPU or neuron_cores, nothing is added."
    params = {"resources": "'{\"TPU\": 2}'"}
    assert inferred({"aws.amazon.com/neuroncore": 4}, params) == params


def test_an_accelerator_whose_json_fails_stops_the_inference_there() -> None:
    # KubeRay returns json.Marshal's error from addWellKnownAcceleratorResources: keys after
    # it in sorted order (nvidia.com/gpu after google.com/tpu) are not looked at.
    assert inferred({"google.com/tpu": HUGE, "nvidia.com/gpu": 1}) == {}
    assert inferred({"amd.com/gpu": 1, "google.com/tpu": HUGE}) == {"num-gpus": "1"}


@pytest.mark.parametrize(
    ("params", "port"),
    [
        ({"dashboard-port": "8266"}, 8266),
        ({"dashboard-port": "-1"}, -1),  # int32 parses; the value is the user's business
        ({"dashboard-port": "2147483647"}, 2147483647),
        ({"dashboard-port": "-2147483649"}, 8265),
        ({"dashboard-port": "8266.0"}, 8265),
        ({}, 8265),
    ],
)
def test_port_param_is_go_parseint_bitsize_32(params: dict[str, str], port: int) -> None:
    assert startparams.port_param(params, "dashboard-port", 8265) == port
