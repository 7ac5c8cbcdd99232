"""The SKU of an imported log's devices (soak.importers.sku): given with --profile, else
guessed from the name column, else from memory.total and clocks.max.sm; never a guess
where two SKUs would fit or none does."""

from soak.importers.sku import guess_sku, settle_sku
from soak.profile import load_profile


def test_the_name_column_names_the_sku():
    sku = guess_sku("NVIDIA A100-SXM4-80GB", None, None)
    assert sku is not None and sku.profile == "a100-sxm"
    assert sku.basis == "guessed from the name column (NVIDIA A100-SXM4-80GB)"
    assert (sku.facts.slowdown_temp_c, sku.facts.max_operating_temp_c) == (89.0, 85.0)


def test_without_a_known_name_memory_and_maximum_clock_tell_it():
    sku = guess_sku("GPU-model-unknown", 143771.0, 1980.0)
    assert sku is not None and sku.profile == "h200"
    assert sku.basis == "guessed from memory.total 143771 MiB and clocks.max.sm 1980 MHz"


def test_no_guess_without_a_match_or_with_only_half_of_one():
    assert guess_sku(None, None, None) is None
    assert guess_sku(None, 81559.0, None) is None  # the clock is needed too
    assert guess_sku("Tesla V100-SXM2-32GB", 32510.0, 1530.0) is None


def test_a_profile_with_a_sku_is_used_over_the_guess():
    sku = settle_sku(load_profile("h100-sxm"), "NVIDIA A100-SXM4-80GB", None, None)
    assert sku is not None and (sku.profile, sku.basis) == ("h100-sxm", "given with --profile")
    # a profile without one (the default) leaves the guess
    sku = settle_sku(load_profile(None), "NVIDIA A100-SXM4-80GB", None, None)
    assert sku is not None and sku.profile == "a100-sxm"
