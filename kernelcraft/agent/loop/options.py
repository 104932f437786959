"""What one `kernelcraft optimize` run is asked for: the task, its budgets, the model, where it runs.

The command line, `adapt` and a level's run build an `OptimizeOptions`; `explore.optimize` starts
the tree from it and `runloop.Explorer` reads it step after step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from kernelcraft.agent.llm.config import LLMConfig
from kernelcraft.base.knobs import Knobs
from kernelcraft.base.targets import DEFAULT_TARGET
from kernelcraft.schema.presets import DEFAULT_PRESET, PresetName, TunerSteps


@dataclass
class OptimizeOptions:
    task: Path
    seed: Path | None = None
    no_seed: bool = False  # start without a seed even where one lies beside the task
    steps: int = 10
    llm: LLMConfig = field(default_factory=LLMConfig)
    out: Path | None = None
    target: str = DEFAULT_TARGET
    policy: str = "adaexplore"
    preset: PresetName = DEFAULT_PRESET
    level: int = 0  # the task's KernelBench level (picks the preset's c_exp); 0: none
    # Values over the preset's (the tree records them): adapt's trees set learn_rules.
    params: dict[str, int | float | str | bool] = field(default_factory=dict)
    server_url: str | None = None
    token_env: str | None = None
    db_path: Path | None = None
    max_total_tokens: int | None = None
    max_dollars: float | None = None
    stall: int | None = None  # stop after this many steps in a row without a new best (KernelEvolve)
    roofline_stop: float | None = None  # stop once the best kernel runs at this fraction of the roofline
    search_seed: int = 0
    progress: bool = True
    compile_check: bool = True
    tuner_steps: TunerSteps | None = None  # with an LLM: which small steps the tuner writes; None: the tree's
    parallel: int = 1  # steps in flight at once
    evaluator: Literal["local", "ray"] = "local"  # the in-process server's evaluator
    ray_address: str | None = None
    dry_run: bool = False  # print the first step's prompt instead of calling a model
    dry_run_scratch: bool = False  # (a dry run's own: its throwaway run directory and database)
    fresh: bool = False  # no warm start from an earlier tree's best kernel in the database
    knobs: Knobs | None = None  # the settings the caller read once (the CLI's); None: `session.driver_knobs`

    def tree_params(self) -> dict[str, int | float | str | bool]:
        """The values this run puts over its preset's."""
        given = dict(self.params)
        if self.level:
            given["level"] = self.level
        if self.tuner_steps is not None:
            given["tuner_steps"] = self.tuner_steps
        if self.fresh:
            given["warm_start"] = False
        return given

    def run_dir(self) -> Path:
        """--out, else ./kernelcraft-runs/<task name> (the folder's name for a `task.py`)."""
        if self.out is not None:
            return self.out
        return Path("kernelcraft-runs") / (
            self.task.parent.name if self.task.name == "task.py" else self.task.stem
        )
