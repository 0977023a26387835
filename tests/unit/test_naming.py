"""The naming scheme: two models' derived names never meet, whatever the (admitted) names are."""

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st
from tensorkiln.builders.naming import target_name
from tensorkiln_api.names import MODEL_NAME_MAX, MODEL_NAME_RULES, TARGET_NAME_MAX, model_name_problems

CLASSES = ["nvidia-l4", "nvidia-h100-80gb-hbm3", "cpu-amd64-amd-avx512vnni", "nvidia-a100-sxm4-40gb", "x" * 60]
model_names = st.from_regex(r"[a-z]([-a-z0-9]{0,42}[a-z0-9])?", fullmatch=True).filter(
    lambda n: not model_name_problems(n)
)


def test_the_reported_pair_no_longer_shares_a_name():
    # Model `x` on nvidia-l4 and a model named as x's old per-target objects.
    assert target_name("x", "nvidia-l4") != "x-nvidia-l4"
    assert "x-nvidia-l4" not in {target_name("x-nvidia-l4", c) for c in CLASSES}
    assert model_name_problems(target_name("x", "nvidia-l4"))  # a per-hardware name is no model name


@settings(max_examples=300)
@given(st.lists(model_names, min_size=2, max_size=2, unique=True))
def test_derived_names_of_two_models_never_collide(pair):
    first, second = pair
    derived = [{name, *(target_name(name, c) for c in CLASSES)} for name in pair]
    assert not derived[0] & derived[1], (first, second)


@given(model_names)
def test_every_derived_name_fits_and_keeps_the_model_name_whole(name):
    for hardware_class in CLASSES:
        derived = target_name(name, hardware_class)
        assert len(derived) <= TARGET_NAME_MAX and derived.split("--", 1)[0] == name
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", derived)  # a DNS-1035 label: a Service name


def test_names_no_derived_object_can_carry_are_refused_with_the_limit():
    assert model_name_problems("resnet50") == []
    assert model_name_problems("m" * MODEL_NAME_MAX) == []
    (too_long,) = model_name_problems("m" * (MODEL_NAME_MAX + 1))
    assert too_long.startswith("metadata.name: must be at most 44 characters")
    (dotted,) = model_name_problems("resnet.v2")
    assert "no dots" in dotted and dotted.startswith("metadata.name")
    assert any("'--'" in p for p in model_name_problems("a--b"))
    assert model_name_problems("7b-chat")  # a Service name starts with a letter


def test_each_rule_has_a_cel_twin_naming_the_same_limit():
    for cel, _, message in MODEL_NAME_RULES:
        assert cel.startswith(("self.metadata.name", "size(self.metadata.name)", "!self.metadata.name"))
        assert message.startswith("metadata.name: ")
    assert len(list(itertools.chain(MODEL_NAME_RULES))) == 3
