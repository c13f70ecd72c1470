"""The render options' feature gates: KubeRay's defaults and copies (raycluster.md §0.1)."""

from __future__ import annotations

import pytest

from renderer.options import DEFAULT_FEATURE_GATES, RenderOptions


def test_feature_gate_defaults_are_kuberays() -> None:
    # §0.1: the beta gates are on, the alpha gates off.
    options = RenderOptions()
    assert options.gate("RayClusterStatusConditions")
    assert options.gate("RayMultiHostIndexing")
    assert not options.gate("RayClusterNetworkPolicy")
    assert not options.gate("RayClusterHistoryServer")
    assert not options.gate("NoSuchGate")


def test_with_gates_changes_a_copy() -> None:
    options = RenderOptions()
    changed = options.with_gates(RayClusterMTLS=True, RayMultiHostIndexing=False)
    assert changed.gate("RayClusterMTLS") and not changed.gate("RayMultiHostIndexing")
    assert not options.gate("RayClusterMTLS")
    assert set(changed.feature_gates) == set(DEFAULT_FEATURE_GATES)


def test_with_gates_refuses_unknown_gates() -> None:
    with pytest.raises(ValueError, match="unknown feature gate\\(s\\): Bogus, Nope"):
        RenderOptions().with_gates(Nope=True, Bogus=False)
