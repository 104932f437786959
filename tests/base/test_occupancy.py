"""Occupancy from a compiled kernel's resources (issue 29): the CUDA calculation, per target."""

from __future__ import annotations

import pytest

from kernelcraft.base.occupancy import describe, occupancy


@pytest.mark.parametrize(
    ("target", "registers", "shared", "warps", "fraction", "limit"),
    [
        ("sm_90a", 32, 0, 4, 1.0, "warps"),  # 16 blocks x 4 warps = the SM's 64
        ("sm_90a", 128, 0, 4, 0.25, "registers"),  # 128 x 32 x 4 = 16 Ki registers a block: 4 blocks
        ("sm_90a", 255, 0, 8, 0.125, "registers"),  # 255 rounds to 8 Ki a warp: 1 block of 8 warps
        ("sm_90a", 64, 100 * 1024, 4, 0.125, "shared memory"),  # 2 blocks of 101 KiB in 228 KiB
        ("sm_80", 64, 100 * 1024, 4, 0.0625, "shared memory"),  # 164 KiB: 1 block
        ("sm_89", 32, 0, 4, 1.0, "warps"),  # 48 warps an SM
    ],
)
def test_occupancy_follows_the_limiting_resource(target, registers, shared, warps, fraction, limit) -> None:
    occ = occupancy(target, registers, shared, warps)
    assert occ is not None and occ.fraction == pytest.approx(fraction) and occ.limited_by == limit, occ


def test_unknown_targets_or_figures_give_nothing() -> None:
    assert occupancy("gfx942", 64, 0, 4) is None and occupancy("sm_90a", None, 0, 4) is None
    assert (
        describe(None) == ""
        and describe(occupancy("sm_90a", 128, 0, 4)) == "occupancy 25% (limited by registers)"
    )
