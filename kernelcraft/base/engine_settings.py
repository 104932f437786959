"""The evaluation engine's settings as one pydantic-settings object (issue 28).

Kept out of `base/config.py`, which workers and the CLI's fast start import: pydantic-settings
costs ~0.1 s to import, and only the processes that start an engine (the server, a command's
evaluator, a Ray actor's driver) need it. `tests/base/test_engine_settings.py` checks that every
`KERNELCRAFT_*` variable the engine reads is a field here, so no path that passes the settings
on (a Ray actor's environment) can leave one behind.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class EngineSettings(BaseSettings):
    """The evaluation engine's settings, one `KERNELCRAFT_*` variable each (pydantic-settings):
    the one reader of them. Switches read "on" unless the variable says off, 0, no or false.

    The process that starts the engine reads them (`EngineSettings()`); what it starts elsewhere
    gets the same values explicitly: a Ray actor through `to_env()` in its runtime environment
    (`engine/cluster/ray_evaluator.py`, which takes the names from `env_names()` so that none is left
    behind), a worker through the pool's settings and the environment it inherits."""

    model_config = SettingsConfigDict(env_prefix="KERNELCRAFT_", extra="ignore", frozen=True)

    sandbox: bool = True
    """The candidates' box (engine/box/__init__.py); off only for debugging."""
    sandbox_pidns: bool | None = None
    """A PID namespace per worker; None: on for CPU workers, off on a GPU (CUDA IPC)."""
    sandbox_identity: Literal["nobody", "root"] = "nobody"
    """Run by root, workers become nobody, or stay root in a user namespace of their own."""
    zygote: bool = True
    """Fork workers from a zygote that has imported torch and Triton (engine/startup/zygote.py)."""
    shrink: bool = True
    """Shrink a large KernelBench task's sizes in the interpreter (engine/source/shrink.py)."""
    prebuilt: bool = True
    """Build Triton's C helpers once per machine (engine/startup/prebuilt.py)."""
    bytecode_cache: bool = True
    """Keep kernelcraft's bytecode where Python keeps none (base/bytecode.py)."""

    @field_validator("sandbox_identity", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @classmethod
    def env_names(cls) -> list[str]:
        """The variable of every setting."""
        return [f"KERNELCRAFT_{name.upper()}" for name in cls.model_fields]

    def to_env(self) -> dict[str, str]:
        """Every setting as the variable that gives it this value (a None is left out)."""
        out = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is not None:
                out[f"KERNELCRAFT_{name.upper()}"] = (
                    ("on" if value else "off") if isinstance(value, bool) else str(value)
                )
        return out


def engine_settings() -> EngineSettings:
    """The engine's settings as this process's environment gives them now."""
    return EngineSettings()
