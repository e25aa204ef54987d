#!/usr/bin/env bash
# Usage: bash tools/gpu_check.sh [steps...]            (on a GPU machine, from the repo root)
#   steps:   build tests sanitize sass profile bench benchengine benchops benchsteps benchfull extras examples notebook
#   presets: engine | stencils | reductions   (build, that part's tests, sanitizers and suite)
#   default: build tests sanitize sass bench examples notebook
# Logs go to $OUT (else ./gpu_check_out); the summary also to 00_summary.txt, every log to 01_logs.tgz.
# build compiles the module (the default kernel instances; the rest compile on first use) and checks
# one call of each op against the CPU.
# Knobs: PYTEST_ARGS (one pytest process, those args), TEST_GROUPS="name:args;name:args",
#   PYTEST_WORKERS, GROUP_WORKERS (xdist processes: the whole suite's, a group's),
#   SAN_OPS, SAN_STAGES, SAN_RACE_STAGES, SAN_JOBS, BENCH_OPS, BENCH_SWEEP, PYTEST_TIMEOUT.
# The whole default set does not fit one 600 s call: run build, then tests, then the rest.
set -uo pipefail
STEPS=${*:-build tests sanitize sass bench examples notebook}
if [ "$STEPS" = engine ]; then
  STEPS="build tests sanitize benchengine"
  # test_engine_cuda.py's stream_copy cases, the tma/shared-memory errors and the per-kernel SASS
  # check (its stencil and reduce cases belong to the ops' checks), in three processes.
  export TEST_GROUPS=${TEST_GROUPS:-"copy:tests/test_stream_copy.py tests/test_engine_headers.py tests/test_tuning.py;\
engine_matrix:tests/test_engine_cuda.py -k stream_copy_matrix;\
engine_rest:tests/test_engine_cuda.py -k 'stream_copy and not matrix or tma_error or shared_memory or sass'"}
  export SAN_OPS=${SAN_OPS:-copy} SAN_STAGES=${SAN_STAGES:-1,2,3,4,8} SAN_RACE_STAGES=${SAN_RACE_STAGES:-1,2,3,4,8}
elif [ "$STEPS" = stencils ]; then
  STEPS="build tests sanitize benchops extras examples"
  export TEST_GROUPS=${TEST_GROUPS:-"stencil:tests/test_stencil.py;stencil3d:tests/test_stencil3d.py tests/test_steps.py;\
tuning:tests/test_tuning.py"}
  export SAN_OPS=${SAN_OPS:-stencil2d,stencil1d,stencil3d,grad} SAN_STAGES=${SAN_STAGES:-2} SAN_RACE_STAGES=${SAN_RACE_STAGES:-2}
  export BENCH_OPS=${BENCH_OPS:-stencil1d,stencil2d,stencil3d} BENCH_SWEEP=${BENCH_SWEEP:-1}
elif [ "$STEPS" = reductions ]; then
  STEPS="build tests sanitize benchops"
  export TEST_GROUPS=${TEST_GROUPS:-"reduce_a:tests/test_reduce.py -k 'not layout';reduce_layouts:tests/test_reduce.py -k layout;\
states:tests/test_reduce_states.py tests/test_opinfo.py;tuning:tests/test_tuning.py"}
  export SAN_OPS=${SAN_OPS:-reduce} SAN_STAGES=${SAN_STAGES:-2} SAN_RACE_STAGES=${SAN_RACE_STAGES:-2}
  export BENCH_OPS=${BENCH_OPS:-reduce} BENCH_SWEEP=${BENCH_SWEEP:-1}
fi
has() { [[ " $STEPS " == *" $1 "* ]]; }
LOG=${OUT:-$PWD/gpu_check_out}
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1
# CUPIPE_TEST_PRECOMPILE=1 compiles every copy, 1-D/2-D stencil and reduce instance before the
# tests (tests/conftest.py): ~3400 instances, past a 600 s device call on 16 cores. Off by default:
# the xdist workers compile what the tests call, on first use, in parallel.
export CUPIPE_TEST_PRECOMPILE=${CUPIPE_TEST_PRECOMPILE:-0}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export MAX_JOBS=${MAX_JOBS:-16}
# The device image's default g++ (/opt/gcc) links libstdc++ statically into the extension, and
# then every C++ exception thrown across the boundary crashes; use the system compiler.
if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CC=/usr/bin/gcc; fi
summary=()
# The GPU's compute capability as nvcc's sm_ suffix (90a on Hopper).
gpu_arch() { python3 -c "import torch; a, b = torch.cuda.get_device_capability(); print(f'{a}{b}' + ('a' if (a, b) == (9, 0) else ''))"; }
note() { summary+=("$1"); echo ">>> $1"; }

nvidia-smi -L | tee "$LOG/device.txt"
python3 -c "import torch, setuptools, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0], 'setuptools', setuptools.__version__)" | tee -a "$LOG/device.txt"

if has build; then
t0=$(date +%s)
build_ok() {  # $1: the log
  python3 -m pip install --no-build-isolation --no-deps -e . >"$1" 2>&1 &&
    python3 - >>"$1" 2>&1 <<'PY'
import cupipe, torch  # the module loads and its kernels run: one call of each op against the CPU
assert cupipe.build_info["with_cuda"] and torch.cuda.is_available()
x, w = torch.randn(3, 70, 90), torch.randn(5, 3)
for f in (lambda t: cupipe.stream_copy(t), lambda t: cupipe.stencil2d(t, w.to(t.device)),
          lambda t: cupipe.stencil1d(t, w[:, 0].to(t.device)), lambda t: cupipe.reduce(t, "sum", -1)):
    torch.testing.assert_close(f(x.cuda()).cpu(), f(x), atol=1e-4, rtol=1e-4)
print("smoke: ok")
PY
}
build_ok "$LOG/build.log"; rc=$?
if [ $rc -eq 0 ]; then
  info=$(python3 -c "import cupipe; b = cupipe.build_info; print(f\"arch {b['arch_list']}, {b['aot_instances']} kernel instances ahead of time\")")
  note "build: ok in $(( $(date +%s) - t0 ))s ($info)"
else
  grep -E "error|Error" "$LOG/build.log" | head -30; tail -30 "$LOG/build.log"; note "build: FAILED"; printf '%s\n' "${summary[@]}"; exit 1
fi
fi

if has tests; then
t0=$(date +%s)
# The slowest tests, and the stack of any test still running after 240 s (a hang, or a long
# first-use compile), go to the log: a call that ends at its deadline still names them.
PYTEST_DIAG="--durations=20 -o faulthandler_timeout=240"
if [ -n "${PYTEST_ARGS:-}" ]; then
  CUPIPE_SLOW=1 timeout ${PYTEST_TIMEOUT:-400} python3 -m pytest -q -p no:cacheprovider $PYTEST_DIAG $PYTEST_ARGS >"$LOG/pytest.log" 2>&1
  rc=$?
  grep -E "^(FAILED|ERROR)" "$LOG/pytest.log" | head -40
  note "pytest (CPU+CUDA, slow included): rc=$rc, $(tail -1 "$LOG/pytest.log") [$(( $(date +%s) - t0 ))s]"
else
  # Every file of tests/ in one pytest run spread over PYTEST_WORKERS (14) xdist processes, which
  # compile the kernels they call on first use in parallel. TEST_GROUPS="name:pytest args;..."
  # runs those groups instead, side by side, each over GROUP_WORKERS (4) unless it names its -n.
  if [ -n "${TEST_GROUPS:-}" ]; then
    IFS=';' read -ra groups <<<"$TEST_GROUPS"
  else
    groups=("all:-n ${PYTEST_WORKERS:-14} tests")
  fi
  for g in "${groups[@]}"; do
    args=${g#*:}
    [[ " $args " == *" -n "* ]] || args="-n ${GROUP_WORKERS:-4} $args"
    (eval "CUPIPE_SLOW=1 timeout ${PYTEST_TIMEOUT:-500} python3 -m pytest -q -p no:cacheprovider $PYTEST_DIAG $args" \
       >"$LOG/pytest_${g%%:*}.log" 2>&1; echo $? >"$LOG/pytest_${g%%:*}.rc") &
  done
  wait
  for g in "${groups[@]}"; do
    n=${g%%:*}
    grep -E "^(FAILED|ERROR)" "$LOG/pytest_$n.log" | head -20
    note "pytest $n (CPU+CUDA, slow included): rc=$(cat "$LOG/pytest_$n.rc"), $(tail -1 "$LOG/pytest_$n.log")"
  done
  note "pytest: ${#groups[@]} processes [$(( $(date +%s) - t0 ))s]"
fi
fi

if has sanitize; then
t0=$(date +%s)
# One process per tool x mechanism, SAN_JOBS at a time: synccheck stops a kernel at its first
# error, so a report in one mechanism cannot hide the others, and the processes (mostly host-bound
# Python under the tools) run side by side.
mechs="sync pipeline pipeline_thread primitives cg barrier specialized tma"
for tool in memcheck racecheck synccheck; do
  stages=${SAN_STAGES:-1,2,3}; [ "$tool" = racecheck ] && stages=${SAN_RACE_STAGES:-1,2}
  for m in $mechs; do
    while [ "$(jobs -rp | wc -l)" -ge "${SAN_JOBS:-8}" ]; do wait -n; done
    (compute-sanitizer --tool $tool --error-exitcode 9 python3 tools/sanitize_cases.py $stages $m \
       >"$LOG/sanitizer_${tool}_$m.log" 2>&1; echo $? >"$LOG/sanitizer_${tool}_$m.rc") &
  done
done
wait
for tool in memcheck racecheck synccheck; do
  line="compute-sanitizer $tool (${SAN_OPS:-every op}):"
  for m in $mechs; do
    f="$LOG/sanitizer_${tool}_$m"
    n=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$f.log" | tail -1 | grep -oE "[0-9]+ (error|hazard)" | head -1 | grep -oE "[0-9]+")
    # the cases' own verdict: OK, N MISMATCHES, or none (the process did not get to the end)
    res=$(grep -o "sanitize_cases:.*" "$f.log" | tail -1 | sed 's/.*: //')
    line="$line $m rc=$(cat "$f.rc") ${n:-?} ${res:-no-verdict};"
  done
  note "$line"
done
if nvcc -std=c++17 -arch=sm_$(gpu_arch) \
     -o /tmp/probe_pipeline tools/probes/probe_pipeline_synccheck.cu >/dev/null 2>&1; then
  # libcu++'s primitives alone, no cupipe code: what synccheck reports on them is the tool's, not
  # cupipe's. barrier_ring args: stages tile_bytes blocks tiles-per-block (cupipe's ring's shape).
  for probe in "pipeline" "barrier" "barrier_ring 2 8192 20 3" "barrier_ring4 1 8192 20 1" \
               "barrier_ring4 2 8192 20 3"; do
    name=$(echo $probe | tr ' ' '_')
    compute-sanitizer --tool synccheck /tmp/probe_pipeline $probe >"$LOG/sanitizer_synccheck_probe_$name.log" 2>&1
    note "synccheck, bare probe '$probe' (no cupipe code): $(grep -E 'ERROR SUMMARY' "$LOG/sanitizer_synccheck_probe_$name.log" | head -1) $(grep -m1 -o 'Barrier error detected.*' "$LOG/sanitizer_synccheck_probe_$name.log")"
  done
fi
# Where the first reports point (kernel and PC), for the mechanisms that have any.
for m in $mechs; do
  f="$LOG/sanitizer_synccheck_$m.log"
  [ -f "$f" ] && grep -q "Barrier error" "$f" && { echo "--- first synccheck report, $m:"; grep -m1 -A7 "Barrier error" "$f" | cut -c1-200; }
done
note "sanitizers took $(( $(date +%s) - t0 ))s"
fi

if has sass; then
so=$(python3 -c "import cupipe._C as c; print(c.__file__)")
cuobjdump -sass -arch sm_90 "$so" > "$LOG/sass.txt" 2>&1
note "SASS: LDGSTS=$(grep -c LDGSTS "$LOG/sass.txt") UBLKCP=$(grep -c UBLKCP "$LOG/sass.txt") (checked per kernel by tests/test_engine_cuda.py)"
fi

if has profile; then
# Timings of the key cases (+ stream_copy tile sweep), then Nsight Compute metrics per kernel.
python3 tools/profile_cases.py 2>&1 | tee "$LOG/profile_times.txt"
python3 tools/stencil_extras.py 2>&1 | tee "$LOG/stencil_extras.txt"  # 9x9 vs FP32 rate, fp16/bf16, training step
ncu --csv --page raw -k regex:"reduce|stencil|stream_copy|elementwise|copy" --launch-count 14 \
  --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__occupancy_limit_shared_mem \
  python3 tools/profile_cases.py --once >"$LOG/ncu.csv" 2>"$LOG/ncu.err"
python3 - "$LOG/ncu.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))]
keys = ["gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__warps_active.avg.pct_of_peak_sustained_active",
        "launch__registers_per_thread", "launch__grid_size", "launch__occupancy_limit_shared_mem"]
print("ncu: kernel | time | dram% | sm% | warps% | regs | grid | smem-limit blocks")
for r in rows[1:]:
    print(r["Kernel Name"][:70], "|", " | ".join(r.get(k, "?") for k in keys))
PY
note "profile: see profile_times.txt and ncu.csv"
fi

if has benchengine; then
  t0=$(date +%s)
  python3 -m cupipe.bench --suite engine --no-progress --out "$LOG/bench_engine" 2>&1 | tee "$LOG/bench_engine.txt"
  note "engine suite: rc=${PIPESTATUS[0]} [$(( $(date +%s) - t0 ))s] (tables in bench_engine.txt)"
fi
if has benchops; then
  t0=$(date +%s)
  ops=${BENCH_OPS:-stream_copy,stencil1d,stencil2d,reduce}
  python3 -m cupipe.bench --suite ops --ops "$ops" ${BENCH_SWEEP:+--sweep} --reps 30 --no-progress \
    --out "$LOG/bench_ops" 2>&1 | tee "$LOG/bench_ops.txt"
  note "suite ($ops${BENCH_SWEEP:+, with the mechanism x stages sweep}): rc=${PIPESTATUS[0]} [$(( $(date +%s) - t0 ))s]"
  while read -r l; do note "  $l"; done < <(grep -E "^(copy bandwidth|stencil|sum|amax|mean)" "$LOG/bench_ops.txt")
  # The sweep's tables (mechanism x stages for one case per op), whole.
  while read -r l; do note "  $l"; done < <(awk '/^== sweep:/{on=1} on&&/^$/{on=0} on' "$LOG/bench_ops.txt")
fi
if has benchsteps; then
  t0=$(date +%s)
  python3 -m cupipe.bench --suite steps --ops "${BENCH_OPS:-stencil1d,stencil2d,stencil3d}" --no-progress \
    --out "$LOG/bench_steps" 2>&1 | tee "$LOG/bench_steps.txt"
  note "steps suite: rc=${PIPESTATUS[0]} [$(( $(date +%s) - t0 ))s] (tables in bench_steps.txt, plot bench_steps/steps.png)"
fi
if has extras; then
  t0=$(date +%s)
  python3 tools/stencil_extras.py 2>&1 | tee "$LOG/stencil_extras.txt"
  note "stencil extras: rc=${PIPESTATUS[0]} [$(( $(date +%s) - t0 ))s]"
  while read -r l; do note "  $l"; done < <(grep -E "^(stencil|training)" "$LOG/stencil_extras.txt")
fi
if has benchfull; then
  python3 -m cupipe.bench --out "$LOG/bench" 2>&1 | tee "$LOG/bench.txt"
elif has bench; then
  python3 -m cupipe.bench --quick --sweep --out "$LOG/bench" 2>&1 | tee "$LOG/bench.txt"
fi

if has examples; then
for ex in "examples/quickstart.py" "examples/heat_diffusion.py --png $LOG/heat_diffusion.png" \
          "examples/train_smoothing.py" "examples/heat3d.py"; do
  t0=$(date +%s)
  name=$(basename "${ex%% *}" .py)
  python3 $ex >"$LOG/example_$name.log" 2>&1
  r=$?
  note "example $name: rc=$r $(tail -1 "$LOG/example_$name.log") [$(( $(date +%s) - t0 ))s]"
done
fi

if has notebook; then
# nbclient + ipykernel when installed (executed copy saved), else the code cells in order in one
# Python process.
t0=$(date +%s)
python3 tools/run_notebook.py examples/cupipe_tour.ipynb --out "$LOG/cupipe_tour.executed.ipynb" \
  >"$LOG/notebook.log" 2>&1
r=$?
note "notebook examples/cupipe_tour.ipynb: rc=$r $(grep 'run_notebook:' "$LOG/notebook.log" | tail -1) [$(( $(date +%s) - t0 ))s]"
fi
echo
echo "==================== gpu_check summary ===================="
# Also kept as a file whose name sorts first, and every log packed in one archive that sorts
# second: a device call may return only a few files.
printf '%s\n' "${summary[@]}" | tee "$LOG/00_summary.txt"
tar -czf "$LOG/01_logs.tgz" -C "$LOG" --exclude=./01_logs.tgz . 2>/dev/null || echo "gpu_check: could not pack the logs"
