#!/usr/bin/env bash
# ncu of one stencil launch: where the issue slots go (stall reasons per issued instruction),
# the FMA pipe's load, speed of light, occupancy and the SASS opcode mix.
# Usage: bash scripts/ncu_stencil.sh "2d 9x9 f32" tma/2      (a case of scripts/stencil_sweep.py)
set -uo pipefail
case=$1; cfg=${2:-auto/0}
stalls=""
for s in barrier wait long_scoreboard short_scoreboard math_pipe_throttle mio_throttle not_selected selected \
         dispatch_stall lg_throttle no_instruction branch_resolving; do
  stalls+="smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio,"
done
ncu --kernel-name regex:stencil_kernel --launch-count 1 --section SpeedOfLight --section Occupancy \
  --section LaunchStats \
  --metrics "${stalls}smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__warps_eligible.avg.per_cycle_active,sass__inst_executed_per_opcode" \
  --print-metric-instances details python3 scripts/stencil_sweep.py --configs "$cfg" --cases "$case" --once
