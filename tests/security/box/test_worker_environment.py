"""Threat: a worker runs a client's code, which reads its environment; the server's environment
holds secrets under names no list of secret-looking words catches (a database URL with its
password). The worker inherits an allowlist (docs/security.md, "The box": the worker's environment);
the end-to-end check is tests/engine/host/test_verify_cheats.py's
`test_verify_never_shows_a_candidate_the_parents_secrets` with conftest's planted names."""

from __future__ import annotations

import random
import string

from kernelcraft.base.knobs import Knobs
from kernelcraft.engine.box import environment
from kernelcraft.engine.machine import pool

SECRET_LOOKING = {
    "ANTHROPIC_API_KEY": "sk-ant-1",
    "GH_TOKEN": "ghp_2",
    "DB_PASSWORD": "p3",
    "KERNELCRAFT_TOKENS": "alice=t4",
    "KERNELCRAFT_DB": "/srv/kc.db",
}
INNOCENT_LOOKING = {
    "DATABASE_URL": "postgres://u:hunter2@db/kc",
    "SENTRY_DSN": "https://abc@sentry.example/1",
    "REDIS_URL": "redis://:pw@cache:6379",
    "HOSTNAME": "team-server",
    "MY_APP_CONFIG": "{'stripe': 'sk_live_5'}",
    "TRITON_OVERRIDE_DIR": "/evil",
    "TRITON_KERNEL_OVERRIDE": "1",
    "PYTHONSTARTUP": "/evil/start.py",
    "LD_PRELOAD": "/evil/hook.so",
    "LC_SECRET": "x",
}
NEEDED = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONPATH": "/srv/pkgs",
    "CUDA_VISIBLE_DEVICES": "0",
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "TRITON_PTXAS_PATH": "/usr/local/cuda/bin/ptxas",
    "CC": "/opt/gcc/bin/gcc",
    "OMP_NUM_THREADS": "4",
}


def test_the_worker_environment_keeps_only_the_allowlist_whatever_the_names_look_like() -> None:
    env = pool.scrubbed_env({**SECRET_LOOKING, **INNOCENT_LOOKING, **NEEDED})
    assert env == NEEDED


def test_no_variable_outside_the_allowlist_reaches_a_worker() -> None:
    rng = random.Random(36)
    alphabet = string.ascii_uppercase + string.digits + "_"
    for _ in range(300):
        extra = {
            "".join(rng.choices(alphabet, k=rng.randint(1, 24))): "".join(rng.choices(string.printable, k=8))
            for _ in range(rng.randint(0, 20))
        }
        extra |= dict.fromkeys(rng.sample(sorted(environment.KEPT), 3), "kept")
        env = pool.scrubbed_env(extra)
        assert set(env) == set(extra) & environment.KEPT
        assert all(env[k] == extra[k] for k in env)


def test_a_pools_workers_get_the_allowlist_and_the_wires_own_settings_only(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name, value in {**SECRET_LOOKING, **INNOCENT_LOOKING}.items():
        monkeypatch.setenv(name, value)
    env = pool.base_env("cpu", None, interpret=True, settings=Knobs()) | pool.own_env(pool.Path("/tmp/w"))
    leaked = {k for k in env if k in SECRET_LOOKING or k in INNOCENT_LOOKING}
    assert not leaked
    ours = {k for k in env if k not in environment.KEPT}
    assert all(
        k.startswith("KERNELCRAFT_WORKER_") or k in pool.own_env(pool.Path("/")) or k == "TRITON_INTERPRET"
        for k in ours
    ), ours
