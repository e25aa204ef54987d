#!/usr/bin/env bash
# A/B of the tensor maps' L2 promotion for the stencils' tensor-map kernels, through the probes
# scripts/probe_stencil_blocks.cu and scripts/probe_stencil_wide.cu built with PROBE_MECH=Tma
# (PROBE_PROMO, scripts/probe_common.cuh: 0 none, 1 64 B, 2 128 B, 3 256 B).
# Usage: tma_promotion_ab.sh BIN_DIR [rounds = 2] [reps = 50]; PROMOS="3 2" (environment) picks the
# settings (default all four). Every binary in BIN_DIR runs once per setting per round (the
# settings' order rotated each round); one line per run: binary, setting, the copy's ms, the
# launcher's configuration, then every configuration as kernel/threads/stages/tiles-per-block
# (and the wide sweep's tile) with its ms and x of the copy (the 9x9 probe: kernel/threads/tiles-per-block, ms, TFLOP/s).
set -uo pipefail
dir=$1
rounds=${2:-2}
reps=${3:-50}
read -r -a order <<< "${PROMOS:-3 0 1 2}"
n=${#order[@]}
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < n; i++)); do
    p=${order[$(((i + r) % n))]}
    for bin in "$dir"/*; do
      name=$(basename "$bin")
      if ! out=$(PROBE_PROMO=$p "$bin" "$reps" 2>&1); then
        echo "$name promo $p FAILED: $(echo "$out" | grep -m1 FAIL)"
        continue
      fi
      echo "$out" | awk -v b="$name" -v p="$p" '
        /cudaMemcpyAsync/ {
          if (match($0, /cudaMemcpyAsync [0-9.]+/)) c = substr($0, RSTART + 16, RLENGTH - 16)
          if (match($0, /\) [0-9.]+ ms = [0-9.]+x/)) l = " launcher " substr($0, RSTART + 2, RLENGTH - 2)
          next
        }
        $1 ~ /^(narrow|mma|general)$/ && NF == 7 { rows = rows sprintf(" | %s/%s/%s %s %s", $1, $2, $3, $6, $7); next }
        $1 ~ /^(narrow|mma|general)$/ {  # the wide sweep names its tile (32x256) in column 5
          rows = rows sprintf(" | %s/%s/%s/%s%s %s %s", $1, $2, $3, $4, $5 ~ /x/ ? "/" $5 : "", $8, $9)
        }
        END { printf "%-11s promo %s copy %s%s%s\n", b, p, c, l, rows }'
    done
  done
done
