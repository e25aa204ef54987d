#!/usr/bin/env bash
# Usage: bash tools/compare_kobj_sass.sh OLD_KOBJ_DIR NEW_KOBJ_DIR
# Whether two sets of prebuilt kernel objects (tools/kernel_objects.py build) hold the same device
# code: each object's SASS, addresses and architecture headers stripped, compared line by line, so
# a change that should not touch the kernels is shown to leave them alone without a GPU run:
#   cp -r .kobj /tmp/kobj_old; <the change>; python3 tools/kernel_objects.py build --arch 9.0a
#   bash tools/compare_kobj_sass.sh /tmp/kobj_old .kobj
# cuobjdump: $CUOBJDUMP, else the one on PATH, else triton's copy. One line per object (SAME /
# DIFFERENT, with the number of kernels and of differing lines); exits 1 if any differ.
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
