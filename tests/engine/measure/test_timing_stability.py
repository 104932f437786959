"""Profiles that repeat: interleaved rounds must agree (an outlier round is left out and measured
again), and what else ran on the GPU is said (`job.timing._Rounds`, `measure/samples.py`,
`measure/gpustate.py`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kernelcraft.engine.host.job.timing import MAX_PROFILE_ROUNDS, MIN_PROFILE_ROUNDS, _Rounds
from kernelcraft.engine.measure import gpustate
from kernelcraft.engine.measure.samples import agreeing_rounds, round_spread
from kernelcraft.engine.wire.protocol import Samples


def _round(median: float, n: int = 40, jitter: float = 0.002) -> list[float]:
    return [median * (1 + jitter * ((i % 5) - 2) / 2) for i in range(n)]


def test_a_round_two_and_a_half_times_slower_is_left_out() -> None:
    rounds = [_round(100.0), _round(250.0), _round(101.0), _round(99.5)]
    kept = agreeing_rounds(rounds, 0.05)
    assert len(kept) == 3 and all(max(r) < 110 for r in kept)
    assert round_spread(kept) < 0.02 and round_spread(rounds) > 1.0


def test_short_callables_are_not_held_to_round_agreement() -> None:
    rounds = [_round(3.0), _round(4.0), _round(3.1)]  # launch jitter at a few µs
    assert len(agreeing_rounds(rounds, 0.05)) == 3


def _feed(rounds: _Rounds, medians: dict[str, float]) -> None:
    rounds.count += 1
    for key, m in medians.items():
        rounds.add(key, Samples(times_us=_round(m), method="cuda_events", sets=1))


def test_an_outlier_round_is_measured_again_and_kept_out_of_the_figures() -> None:
    rounds = _Rounds(("candidate", "eager"))
    for cand in (100.0, 250.0, 101.0):  # the second round: a burst from something else
        _feed(rounds, {"candidate": cand, "eager": 200.0})
    assert rounds.count == MIN_PROFILE_ROUNDS and not rounds.done()  # two agreeing rounds only
    _feed(rounds, {"candidate": 100.5, "eager": 201.0})
    assert rounds.done()
    t = rounds.timings()
    assert 99 < t["candidate"].median_us < 102 and t["candidate"].round_spread is not None
    assert t["candidate"].round_spread < 0.02
    assert rounds.words() == "4 interleaved rounds (1 outlier round left out and measured again)"


def test_rounds_that_never_agree_stop_at_the_limit_and_say_so() -> None:
    rounds = _Rounds(("candidate",))
    m = 100.0
    while not rounds.done():
        _feed(rounds, {"candidate": m})
        m *= 1.2  # the clocks keep falling
    assert rounds.count == MAX_PROFILE_ROUNDS and rounds.disagreeing() == ["candidate"]


def test_a_wide_spread_within_agreeing_rounds_asks_for_rounds_but_is_not_unstable() -> None:
    rounds = _Rounds(("eager",))
    while not rounds.done():
        rounds.count += 1
        rounds.add("eager", Samples(times_us=_round(200.0, jitter=0.2), method="cuda_events", sets=1))
    assert rounds.count == MAX_PROFILE_ROUNDS and rounds.disagreeing() == []


def test_gpu_state_parses_slowdowns_and_other_tenants() -> None:
    names = ["hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown"]
    assert gpustate.parse_reasons("Not Active, Active, Not Active", names) == ["hw_thermal_slowdown"]
    apps = "GPU-1, 10, /usr/bin/python3, 900 MiB\nGPU-1, 20, /opt/other/app, 40000 MiB\nGPU-2, 30, x, 1 MiB\n"
    apps += "GPU-1, 77, /usr/bin/python3, 10 MiB\n"
    others, hidden = gpustate.parse_apps(apps, "GPU-1", ours={10}, visible={10, 20})
    assert others == ["20 (app, 40000 MiB)"] and hidden == 1


@pytest.mark.anyio
async def test_gpu_state_asks_nvidia_smi_and_names_a_tenant(tmp_path: Path, monkeypatch) -> None:
    """A stand-in `nvidia-smi` on PATH (a real process answering the real query's CSV): a process
    that is not ours is named, and makes the profile's GPU disturbed."""
    other = os.getppid()  # a live process that is not a descendant of this one
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *query-gpu*) echo 'GPU-abc, Not Active, Not Active, Not Active, Not Active, Not Active' ;;\n"
        f"  *query-compute-apps*) echo 'GPU-abc, {other}, /usr/bin/trainer, 50000 MiB' ;;\n"
        "esac\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    state = await gpustate.gpu_state(0)
    assert state.known and state.slowdowns == [] and state.disturbed
    assert state.tenants == [f"{other} (trainer, 50000 MiB)"]
    assert "other processes on the GPU" in state.words()


@pytest.mark.anyio
async def test_without_nvidia_smi_the_state_is_unknown_not_fine(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    state = await gpustate.gpu_state(0)
    assert not state.known and not state.disturbed and "unknown" in state.words()
