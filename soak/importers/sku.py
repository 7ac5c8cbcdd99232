"""Which SKU an imported log's devices are, so that a log is judged against its SKU's
slowdown temperatures (``temp_margin``, ``slowdown_temp``) though it never read them.

1. ``soak import --profile NAME|FILE`` whose profile has a ``[sku]`` table: that SKU, for
   every device ("given with --profile").
2. Else each device is guessed, among the built-in profiles with a ``[sku]``: by its name
   column (a profile's ``device_names``); else by the memory size and maximum SM clock the
   log holds (``memory.total``, ``clocks.max.sm``), each within ``MATCH`` of one profile's
   and of no other. The guess is stated (the import's output, the report's header) and is
   overridden by giving ``--profile``.
3. Else no SKU: the slowdown temperatures are "not available", as before.

A fact the log holds itself (a dmon ``SDTMP`` column) stands over the SKU's.
"""

from __future__ import annotations

from dataclasses import dataclass

from soak.profile import Profile, SkuFacts, builtin_profiles, load_profile

MATCH = 0.01  # relative: a memory size or clock this close to a SKU's is that SKU's


@dataclass(frozen=True, slots=True)
class Sku:
    """A device's SKU as the import settled it: the profile it is from, its facts, and how
    it was found ("given with --profile", "guessed from the name column ...")."""

    profile: str
    facts: SkuFacts
    basis: str


def _candidates() -> list[Profile]:
    out = []
    for name in builtin_profiles():
        profile = load_profile(name)
        if profile.sku is not None:
            out.append(profile)
    return out


def _near(value: float | None, reference: float | None) -> bool:
    return value is not None and reference is not None and abs(value / reference - 1) <= MATCH


def guess_sku(
    name: str | None, memory_mib: float | None, max_clock_mhz: float | None
) -> Sku | None:
    """Rule 2: the one built-in SKU a device's name, else its memory and clock, match."""
    profiles = _candidates()
    if name:
        wanted = name.removesuffix(" (simulated)").strip().casefold()
        named = [p for p in profiles if any(n.casefold() == wanted for n in p.device_names)]
        if len(named) == 1:
            found = named[0]
            assert found.sku is not None
            return Sku(found.name, found.sku, f"guessed from the name column ({name.strip()})")
    by_size = [
        p
        for p in profiles
        if p.sku is not None
        and _near(memory_mib, p.sku.memory_total_mib)
        and _near(max_clock_mhz, p.sku.max_sm_clock_mhz)
    ]
    if len(by_size) == 1 and by_size[0].sku is not None:
        basis = (
            f"guessed from memory.total {memory_mib:.0f} MiB and clocks.max.sm "
            f"{max_clock_mhz:.0f} MHz"
        )
        return Sku(by_size[0].name, by_size[0].sku, basis)
    return None


def settle_sku(
    profile: Profile | None,
    name: str | None,
    memory_mib: float | None,
    max_clock_mhz: float | None,
) -> Sku | None:
    """Rules 1-3 for one device: the given profile's SKU, else the guess, else None."""
    if profile is not None and profile.sku is not None:
        return Sku(profile.name, profile.sku, "given with --profile")
    return guess_sku(name, memory_mib, max_clock_mhz)
