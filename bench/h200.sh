#!/usr/bin/env bash
# Run on the H200 machine through the device tool, from the repository root:
#   bash bench/h200.sh STEP...     (steps: verify box boxnobody imports trace gputests hostile capture eval evalbox
#                                   cold probe stability tuner tunercookbook server warm hbm floors ray levelrun levelspeed level cookbook pack)
# Environment: STEP_TIMEOUT (s per step), TAIL (log lines shown), EVAL_ARGS, TUNER_ARGS, SERVER_ARGS,
# RAY_ARGS, LEVEL_ARGS, LEVELSPEED_ARGS, COLD_ARGS, COOKBOOK_ARGS, TUNERCB_ARGS, LEVELS (KernelBench levels for the `level` step, default "1 2"; needs .kb/,
# see bench/README.md). `ray` needs .ray/ (bench/README.md says how to make it); `pack` bundles
# $OUT into one out.tgz (the device tool brings back at most 8 files).
# Installs the wheels carried in .whl/ (the machine has no network), then runs each step, writing
# logs and JSON under $OUT. Everything it reports comes from this machine. Make .whl/ here first
# (git ignores it) and name it in the device call's `carry`:
#   xargs -n1 python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl < bench/wheels.txt
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:/tmp/site" KERNELCRAFT_HOME=/tmp/kc-home
if [ ! -e /tmp/site/.kernelcraft-wheels ]; then  # once per machine
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || { echo "wheel install failed"; exit 1; }
  touch /tmp/site/.kernelcraft-wheels
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  python3 -c "import torch, triton, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])"
fi
run() { local name=$1; shift; echo "=== $name: $*"; local t0=$(date +%s); timeout "${STEP_TIMEOUT:-500}" "$@" >"$OUT/$name.log" 2>&1; local rc=$?; echo "=== $name rc=$rc $(( $(date +%s) - t0 ))s"; tail -n "${TAIL:-25}" "$OUT/$name.log"; }
for step in "$@"; do
  case $step in
    verify)
      run verify python3 -m kernelcraft verify examples/softmax/task.py examples/softmax/seed.py --json
      run profile python3 -m kernelcraft profile examples/softmax/task.py examples/softmax/seed.py --json
      run compile python3 -m kernelcraft compile examples/softmax/task.py examples/softmax/seed.py --target sm_90a --target gfx942 --json ;;
    trace)
      for t in elementwise linear; do run "trace_$t" python3 -m kernelcraft profile bench/tasks/$t.py bench/tasks/${t}_triton.py; done ;;
    box)  # the candidate's box as each identity sets it up on this machine (the verdict's note says what is missing)
      for id in nobody root; do
        KERNELCRAFT_SANDBOX_IDENTITY=$id run "box_$id" python3 -m kernelcraft verify examples/softmax/task.py examples/softmax/seed.py --json
      done ;;
    gputests) run gputests python3 -m pytest -m gpu -q -s -p no:cacheprovider tests ;;
    hostile)  # tests/security's hostile candidates on the GPU, as the default identity (docs/security.md)
      for p in tests/security/probes/*.py; do
        n=$(basename "$p" .py); case $n in task_*|fp64_in_fp32|tf32_*) continue ;; esac  # own tasks; TF32 emulation is CPU-only
        python3 -m kernelcraft verify tests/cheats/task_scale.py "$p" --json --trials 1 >"$OUT/hostile_$n.json" 2>"$OUT/hostile_$n.err"
        python3 -c "import json, sys; v = json.load(open(sys.argv[1])); print(sys.argv[2], v['status'], '|', (v.get('evidence') or {}).get('message', '')[:160].replace(chr(10), ' '), '|', v.get('notes'))" "$OUT/hostile_$n.json" "$n" 2>&1 | cut -c1-400
      done
      python3 -m kernelcraft verify tests/security/probes/task_grabs_server_state.py tests/cheats/good.py --json --trials 1 2>/dev/null \
        | python3 -c "import json, sys; v = json.load(sys.stdin); print('task_grabs_server_state', v['status'], v.get('notes'))" ;;
    capture) run capture python3 tests/fixtures/errors/capture.py; tar czf "$OUT/errors-3.6.tgz" tests/fixtures/errors/triton-3.6 2>/dev/null ;;
    eval) run bench_eval python3 bench/bench_eval.py ${EVAL_ARGS:-} ;;
    cookbook)  # bench_cookbook.py: 33 KernelBench tasks against the cookbook (needs .kb/); resumable: repeat until done
      run bench_cookbook python3 bench/bench_cookbook.py .kb/KernelBench --out runs/bench-cookbook ${COOKBOOK_ARGS:-}
      cp runs/bench-cookbook/bench_cookbook.json runs/bench-cookbook/bench_cookbook.md "$OUT/" 2>/dev/null ;;
    evalbox)  # the box's cost: the same benchmark with the box on and off
      for m in on off; do
        mkdir -p "$OUT/box_$m"; OUT="$OUT/box_$m" KERNELCRAFT_SANDBOX=$m run "bench_eval_box_$m" python3 bench/bench_eval.py ${EVAL_ARGS:-}
      done ;;
    cold)  # where a fresh verify's worker start goes (the zygote's stages, each worker's phases), then the benchmark
      run verbose_verify python3 -m kernelcraft -v verify examples/layernorm/task.py examples/layernorm/seed.py
      grep -E "ready|PASSED|FAILED" "$OUT/verbose_verify.log" | cut -c1-300
      run bench_cold_start python3 bench/bench_cold_start.py ${COLD_ARGS:---kernelbench .kb} --json "$OUT/bench_cold_start.json" ;;
    probe)  # where a fresh verify's first seconds go: Triton's first JIT, CUDA's start, the CLI's imports, each stage
      [ -n "${PROBE_JIT:-}" ] && run probe python3 bench/probe_first_verdict.py
      python3 -X importtime -m kernelcraft --help >/dev/null 2>"$OUT/cli_importtime.txt"; sort -t'|' -k2 -n "$OUT/cli_importtime.txt" | tail -6
      for i in 1 2 3; do
        python3 -m kernelcraft -v verify examples/layernorm/task.py examples/layernorm/seed.py --json >"$OUT/verify_$i.json" 2>"$OUT/verify_$i.err"
        python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print(d['seconds'], d['stage_seconds'])" "$OUT/verify_$i.json"
        grep -E "ready|loading the cand|compiling|trial 1 of|verified" "$OUT/verify_$i.err" | cut -c1-200
      done
      if [ -x /tmp/site/bin/py-spy ]; then  # a sampled profile of every process (py-spy wheel in .whl/)
        /tmp/site/bin/py-spy record --subprocesses --format speedscope -r 500 -o "$OUT/verify.speedscope.json" -- \
          python3 -m kernelcraft verify examples/layernorm/task.py examples/layernorm/seed.py >"$OUT/pyspy.log" 2>&1; tail -2 "$OUT/pyspy.log"
        # profile in a fresh home: the reference's torch.compile is timed, not taken from an earlier run
        mkdir -p /tmp/kc-home-profile/cache; for c in pycache triton-helpers; do ln -sfn /tmp/kc-home/cache/$c /tmp/kc-home-profile/cache/$c; done
        KERNELCRAFT_HOME=/tmp/kc-home-profile /tmp/site/bin/py-spy record --subprocesses --format speedscope -r 500 \
          -o "$OUT/profile.speedscope.json" -- python3 -m kernelcraft -v profile examples/layernorm/task.py \
          examples/layernorm/seed.py --json >"$OUT/pyspy_profile.log" 2>&1; grep -E "ready|PASSED|stage_seconds" "$OUT/pyspy_profile.log" | cut -c1-300
      fi ;;
    imports)  # why imports are slower here than on the CPU machine: bytecode caches, and each stage's time
      env | grep -E "^PYTHON" ; python3 -c "import sys; print('dont_write_bytecode', sys.dont_write_bytecode, 'prefix', sys.prefix)"
      python3 -c "import torch, os; d=os.path.join(os.path.dirname(torch.__file__), '__pycache__'); print('torch pycache', os.path.isdir(d), os.access(os.path.dirname(torch.__file__), os.W_OK))"
      for i in 1 2; do python3 -c "import time; t=time.perf_counter(); import torch; a=time.perf_counter(); import triton, triton.language; b=time.perf_counter(); import torch._dynamo; c=time.perf_counter(); print(f'torch {a-t:.2f} s, triton {b-a:.2f} s, dynamo {c-b:.2f} s')"; done
      python3 -X importtime -c "import torch._dynamo" 2>"$OUT/importtime.txt"; sort -t'|' -k1 -n "$OUT/importtime.txt" | tail -15
      python3 -c "import torch, os, glob; d=os.path.dirname(torch.__file__); print('torch .py', len(glob.glob(d+'/**/*.py', recursive=True)), '.pyc', len(glob.glob(d+'/**/__pycache__/*.pyc', recursive=True)))"
      # the same imports with bytecode written to (then read from) a cache of our own: a normal install's case
      for i in 1 2 3; do env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=/tmp/pyc python3 -c "import time; t=time.perf_counter(); import torch; a=time.perf_counter(); import triton, triton.language; b=time.perf_counter(); import torch._dynamo; c=time.perf_counter(); print(f'pycache prefix: torch {a-t:.2f} s, triton {b-a:.2f} s, dynamo {c-b:.2f} s')"; done
      # does importing inductor touch the GPU driver only through torch.cuda.is_available()? (NVML's check does not init CUDA)
      for nvml in 0 1; do PYTORCH_NVML_BASED_CUDA_CHECK=$nvml python3 -c "import time, torch; t=time.perf_counter(); import torch._inductor.compile_fx; d=time.perf_counter()-t; maps=open('/proc/self/maps').read(); print('nvml check', $nvml, 'inductor import', round(d, 2), 's; libcuda mapped', 'libcuda.so' in maps, '; cuda initialised', torch.cuda.is_initialized())"; done
      # CUDA's initialisation in a thread while the main thread imports dynamo: do they overlap?
      python3 -c "import time, threading, torch; t=time.perf_counter(); torch.cuda.init(); a=time.perf_counter(); import torch._dynamo; b=time.perf_counter(); print(f'serial: cuda init {a-t:.2f} s, dynamo {b-a:.2f} s, both {b-t:.2f} s')"
      python3 -c "import time, threading, torch; t=time.perf_counter(); th=threading.Thread(target=torch.cuda.init); th.start(); import torch._dynamo; a=time.perf_counter(); th.join(); b=time.perf_counter(); print(f'threaded: dynamo done {a-t:.2f} s, both {b-t:.2f} s')" ;;
    boxnobody)  # the GPU box tests with the worker leaving root for nobody
      KERNELCRAFT_SANDBOX_IDENTITY=nobody run box_nobody_tests python3 -m pytest -m gpu -q -p no:cacheprovider tests/engine/box/test_box.py ;;
    stability) run bench_stability python3 bench/bench_stability.py --repeats ${REPEATS:-12} --json "$OUT/bench_stability.json" ;;
    tuner) run bench_tuner python3 bench/bench_tuner.py --json "$OUT/bench_tuner.json" ${TUNER_ARGS:-} ;;
    tunercookbook)  # the tuner from the fitting cookbook kernel over level 1 (needs .kb/); resumable: repeat until done
      run bench_tuner_cookbook python3 bench/bench_tuner_cookbook.py .kb/KernelBench --out runs/tuner-cookbook ${TUNERCB_ARGS:-}
      cp runs/tuner-cookbook/bench_tuner_cookbook.json runs/tuner-cookbook/bench_tuner_cookbook.md "$OUT/" 2>/dev/null ;;
    server) run bench_server python3 bench/bench_server.py ${SERVER_ARGS:-} ;;
    warm)  # then the same without the store of compiled kernels: what it saves a profile after a verify
      run bench_warm python3 bench/bench_warm.py --device cuda --examples elementwise softmax layernorm --rounds 10 --json "$OUT/bench_warm.json"
      run bench_warm_nokc python3 bench/bench_warm.py --device cuda --examples elementwise softmax layernorm --rounds 4 --no-kernel-cache --json "$OUT/bench_warm_nokc.json"
      python3 -m pytest -q -m gpu tests/engine/machine/test_kernelcache.py ;;
    hbm) run probe_hbm python3 bench/probe_hbm.py --json "$OUT/probe_hbm.json" ;;
    floors) run cookbook_floors python3 bench/cookbook_floors.py .kb/KernelBench ;;  # needs .kb/
    ray)
      ls -la .ray | head -4
      mkdir -p /tmp/site && tar -xJf .ray/ray-slim.tar.xz -C /tmp/site && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .ray/whl/*.whl >/dev/null 2>&1 || echo "ray install failed"
      run bench_ray python3 bench/bench_ray.py ${RAY_ARGS:-} ;;
    levelrun)  # our Triton candidates for eight level-1 tasks: verdicts, timings, fast_p
      run levelrun python3 -m kernelcraft level .kb/KernelBench/level1 bench/kb_candidates/level1 --problems 19-22,25,28,30,32 --out runs/kb-level1-candidates
      cp -r runs/kb-level1-candidates "$OUT/" ;;
    pack) (cd "$OUT" && tar czf /tmp/out.tgz . && find . -mindepth 1 -delete && mv /tmp/out.tgz .) ;;
    levelspeed)  # issue 41: level 1's baseline from a fresh process, wall time and tasks timed (target <= 120 s, 100 of 100)
      run bench_level python3 bench/bench_level.py .kb/KernelBench/level1 ${LEVELSPEED_ARGS:-} --json "$OUT/bench_level.json" ;;
    level)  # resumable: runs/ survives between calls on a warm machine; call again until every task is done
      for l in ${LEVELS:-1 2}; do
        run "level${l}_baseline" python3 -m kernelcraft level ".kb/KernelBench/level$l" --baseline --out "runs/kb-baseline-level$l" ${LEVEL_ARGS:-}
        cp -r "runs/kb-baseline-level$l" "$OUT/"
      done ;;
    *) echo "unknown step $step" ;;
  esac
done
