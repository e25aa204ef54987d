#!/usr/bin/env bash
# Usage: bash tools/multi_gpu_check.sh [build]      (2+ GPUs; logs go to $OUT or ./multi_gpu_out)
# The multi-GPU check in one call: build in place (with `build`), the
# NCCL tests of cupipe.distributed, and the heat example's weak scaling (same grid per GPU on 1 and
# N GPUs). Knobs: WEAK_OPTS (';'-separated option sets, default: halo 1 with overlap off, on and auto,
# halo 8 and the default halo, whose steps a pass run fused), FREE_SMS (the --free-sms values tried with overlap, default "4 8 16"; empty: none).
set -uo pipefail
LOG=${OUT:-$PWD/multi_gpu_out}
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} MAX_JOBS=${MAX_JOBS:-16}
# NVLink multicast stays off (NVLS): the shared hosts do not support it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CC=/usr/bin/gcc; fi
NGPU=$(nvidia-smi -L | wc -l)
nvidia-smi -L | tee "$LOG/device.txt"
summary=()
note() { summary+=("$1"); echo ">>> $1"; }

if [[ " $* " == *" build "* ]]; then
  t0=$(date +%s)
  python3 -m pip install --no-build-isolation --no-deps -e . >"$LOG/build.log" 2>&1 \
    && note "build: ok in $(( $(date +%s) - t0 ))s" || { tail -30 "$LOG/build.log"; exit 1; }
fi

t0=$(date +%s)
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_distributed.py -k nccl >"$LOG/pytest_nccl.log" 2>&1
note "pytest -k nccl: rc=$? $(tail -1 "$LOG/pytest_nccl.log") [$(( $(date +%s) - t0 ))s]"

# Correctness of the example under torchrun at a checkable size, then weak scaling.
timeout 120 torchrun --standalone --nproc-per-node=$NGPU examples/distributed_heat.py --rows 2048 --cols 2048 \
  --steps 20 --overlap >"$LOG/heat_check.log" 2>&1
note "torchrun heat example ($NGPU ranks, 2048^2, checked vs 1 process): rc=$? $(tail -1 "$LOG/heat_check.log")"
N=${ROWS_PER_GPU:-16384}
for n in 1 $NGPU; do
  IFS=';' read -ra opt_sets <<<"${WEAK_OPTS-;--halo-width 1 --overlap off;--halo-width 1 --overlap on;--halo-width 1 --overlap auto;--halo-width 8}"
  for opts in "${opt_sets[@]}"; do
    opts=$(echo $opts)
    timeout 120 torchrun --standalone --nproc-per-node=$n examples/distributed_heat.py --rows-per-rank $N \
      --cols $N --steps 64 --reps 5 --no-check $opts >"$LOG/weak_${n}_${opts// /_}.log" 2>&1
    note "weak scaling ${N}x${N} per GPU, $n GPU(s) ${opts:-(default halo: fused passes)}: $(grep -i "per-step" "$LOG/weak_${n}_${opts// /_}.log" | tail -1)"
  done
done
# How many SMs the overlapped interior should leave to NCCL (cupipe.distributed.OVERLAP_FREE_SMS).
for f in ${FREE_SMS-4 8 16}; do
  timeout 120 torchrun --standalone --nproc-per-node=$NGPU examples/distributed_heat.py --rows-per-rank $N \
    --cols $N --steps 50 --reps 5 --no-check --halo-width 1 --overlap --free-sms $f >"$LOG/weak_${NGPU}_free_sms_$f.log" 2>&1
  note "weak scaling ${N}x${N} per GPU, $NGPU GPUs --overlap --free-sms $f: $(grep -i "per-step" "$LOG/weak_${NGPU}_free_sms_$f.log" | tail -1)"
done
echo; echo "==================== multi_gpu_check summary ===================="
printf '%s\n' "${summary[@]}"
