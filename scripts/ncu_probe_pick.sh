#!/usr/bin/env bash
# ncu (full set, locked clocks) of one row of scripts/probe_stencil_blocks.cu's wide or resident
# sweep: the details page and a summary of the SASS source page, into $OUT (or /tmp).
# Usage: bash scripts/ncu_probe_pick.sh BINARY ROW NAME
#   BINARY: a compiled probe (PROBE_WIDE=1 or 2); ROW: its PROBE_PICK; NAME: the files' stem.
set -uo pipefail
bin=$1; row=$2; name=$3; out=${OUT:-/tmp}
rep=/tmp/ncu_$name
PROBE_PICK=$row ncu --set full -k regex:stencil_kernel --launch-skip 2 --launch-count 1 -f -o "$rep" "$bin" 1 \
  >"$out/ncu_${name}_run.txt" 2>&1
ncu -i "$rep.ncu-rep" --page details >"$out/ncu_${name}.txt" 2>&1
ncu -i "$rep.ncu-rep" --page source --csv --print-source sass >"/tmp/ncu_${name}_src.csv" 2>/dev/null &&
  python3 scripts/ncu_source_summary.py "/tmp/ncu_${name}_src.csv" >>"$out/ncu_${name}.txt" 2>&1
grep -E "^ +(Duration|DRAM Throughput|L2 Cache Throughput|Issue Slots Busy|Achieved Occupancy|Registers Per Thread|Executed Instructions) " \
  "$out/ncu_${name}.txt" | sed "s/^/$name: /"
