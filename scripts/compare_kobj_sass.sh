#!/usr/bin/env bash
# Whether two sets of prebuilt kernel objects (scripts/kernel_objects.py build) hold the same
# device code: for every object in both, its SASS (cuobjdump -sass) with addresses and the
# architecture header lines stripped, compared line by line. A change that should not touch
# the kernels (host code, a branch that only other architectures compile, a comment) is then
# shown to leave the GPU's machine code alone without a GPU run.
#
#   cp -r .kobj /tmp/kobj_old        # before the change
#   python3 scripts/kernel_objects.py build --arch 9.0a
#   bash scripts/compare_kobj_sass.sh /tmp/kobj_old .kobj
#
# cuobjdump: $CUOBJDUMP, else the one on PATH, else the copy triton ships (the CPU machine has
# no CUDA binutils). Prints one line per object (SAME / DIFFERENT with the number of kernels and
# of differing lines) and exits 1 if any differ.
set -uo pipefail
old=${1:?usage: compare_kobj_sass.sh OLD_KOBJ_DIR NEW_KOBJ_DIR}
new=${2:?usage: compare_kobj_sass.sh OLD_KOBJ_DIR NEW_KOBJ_DIR}
co=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$co" ]; then
  co=$(python3 -c "import os, triton; print(os.path.join(os.path.dirname(triton.__file__), 'backends/nvidia/bin/cuobjdump'))" 2>/dev/null)
fi
[ -x "$co" ] || { echo "no cuobjdump (set CUOBJDUMP)"; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
sass() {  # $1: an .o.xz; prints its SASS without addresses or architecture headers
  xz -dc "$1" >"$tmp/o.o" && "$co" -sass "$tmp/o.o" |
    grep -v -E '^\s*$|code for sm_|Fatbin|arch = |\.target|headerflags' |
    sed -E 's#/\*[0-9a-f]{4,}\*/##'
}
status=0
for f in "$new"/*.o.xz; do
  b=$(basename "$f")
  [ -f "$old/$b" ] || { echo "$b: only in $new"; continue; }
  sass "$old/$b" >"$tmp/a"; sass "$f" >"$tmp/b"
  n=$(grep -c "Function :" "$tmp/b")
  d=$(diff "$tmp/a" "$tmp/b" | grep -c '^[<>]')
  if [ "$d" -eq 0 ]; then echo "$b: SAME ($n kernels)"; else echo "$b: DIFFERENT ($n kernels, $d lines)"; status=1; fi
done
exit $status
