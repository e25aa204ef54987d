"""Usage: python3 tools/cubin_sections.py A.cubin B.cubin SECTION_REGEX

Compare the machine code of kernels in two cubins section by section, without cuobjdump (nvcc
alone suffices): every section whose name matches the pattern, with its size and a hash, SAME where
both cubins hold it byte for byte. E.g. one kernel file before and after a change:

    nvcc -cubin -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Icsrc -o /tmp/a.cubin build/aot_kernels/stencil_000.cu
    python3 tools/cubin_sections.py /tmp/a.cubin /tmp/b.cubin 'text.*stencil_kernel'

(The build's exact flags: `compile_flags("9.0a")` in build_config.py. `.nv.info.*` sections hold
symbol indices and differ between any two cubins; `.text.*` is the code.)
"""
import hashlib
import re
import struct
import sys


def sections(path):
    """Section name -> bytes of an ELF64 little-endian file (a cubin)."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2:
        sys.exit(f"{path}: not an ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = []
    for i in range(shnum):
        name, _type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        headers.append((name, off, size))
    names_at = headers[shstrndx][1]
    out = {}
    for name, off, size in headers:
        end = data.index(b"\0", names_at + name)
        out[data[names_at + name:end].decode()] = data[off:off + size]
    return out


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    a, b, pattern = sections(argv[1]), sections(argv[2]), re.compile(argv[3])
    for name in sorted(set(a) | set(b)):
        if not pattern.search(name):
            continue
        x, y = a.get(name), b.get(name)
        show = lambda s: "-" if s is None else f"{len(s)}B {hashlib.sha1(s).hexdigest()[:10]}"
        verdict = "SAME" if x is not None and x == y else "DIFF"
        print(f"{verdict} {show(x):>20s} {show(y):>20s} {name}")


if __name__ == "__main__":
    main(sys.argv)
