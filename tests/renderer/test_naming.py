"""Names: KubeRay's CheckName / CheckLabel (raycluster.md §1.2) and the project's own."""

from __future__ import annotations

import pytest

from renderer import naming


def test_check_name_keeps_the_last_50_characters_then_fixes_the_start() -> None:
    # §1.2, KubeRay's own example: drop from the front, then a leading punctuation mark
    # (here the `-` left by the cut) becomes `r`.
    name = "72fbcc7e-a661-4b18e-ca41-e903-fc3ae634b18e-lazer090scholar-director-s"
    assert naming.check_name(name) == "rca41-e903-fc3ae634b18e-lazer090scholar-director-s"


def test_check_name_replaces_a_leading_digit() -> None:
    assert naming.check_name("7up") == "rup"
    assert naming.check_name("x" * 49 + "12") == "x" * 48 + "12"  # cut to 50, starts with x


def test_check_name_digit_rule_then_punctuation_rule() -> None:
    # A cut that leaves a digit first: the digit rule applies, then the new first character
    # (`r`) is no punctuation.
    assert naming.check_name("a" + "9" + "-" * 49) == "r" + "-" * 49


def test_check_name_leaves_short_valid_names_alone() -> None:
    assert naming.check_name("raycluster-kuberay") == "raycluster-kuberay"
    assert naming.check_name("") == ""


@pytest.mark.parametrize("first", list("!\"#%&'()*,-./:;?@[\\]_{}"))
def test_go_punctuation_is_replaced(first: str) -> None:
    assert naming.check_name(first + "abc") == "rabc"
    assert naming.check_label(first + "abc") == "rabc"


@pytest.mark.parametrize("first", list("$+<=>^`|~"))
def test_go_symbols_are_not_punctuation(first: str) -> None:
    # Go's unicode.IsPunct is false for these (Unicode symbols), so KubeRay keeps them.
    assert naming.check_name(first + "abc") == first + "abc"
    assert naming.check_label(first + "abc") == first + "abc"


def test_check_label_keeps_the_last_63_characters_and_only_fixes_punctuation() -> None:
    # §1.2: "same as CheckName but with limit 63 and only the punctuation rule".
    value = "x" * 10 + "-" + "y" * 62
    assert naming.check_label(value) == "r" + "y" * 62
    assert naming.check_label("9lives") == "9lives"
    assert naming.check_label("z" * 63) == "z" * 63


def test_identifier_label_is_checklabel_of_cluster_and_node_type() -> None:
    # §1.3: ray.io/identifier = CheckLabel(<C> + "-head") / CheckLabel(<C> + "-worker").
    assert naming.identifier("c" * 60, "worker") == "c" * 56 + "-worker"


def test_ingress_name_is_checkname_of_cluster_head_ingress() -> None:
    # §1.2: a 40-character <C> gives a 53-character <C>-head-ingress, first 3 dropped.
    cluster = "abc" + "d" * 37
    assert naming.ingress_name(cluster) == "d" * 37 + "-head-ingress"


def test_status_configmap_name() -> None:
    # DESIGN §1: the syncer's status ConfigMap is `<name>-kuberay-status`.
    assert naming.status_configmap_name("train") == "train-kuberay-status"
    assert naming.intent_configmap_name("train") == "train-kuberay-intent"
