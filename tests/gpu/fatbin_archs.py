#!/usr/bin/env python3
"""fatbin_archs.py OBJ — list the device code an nvcc object carries ("sm_90", "compute_100" for
PTX), read from its .nv_fatbin section (the CUDA fat binary container: a header, then entries of
kind 1 = PTX, 2 = ELF, each naming its architecture). Used by tests/gpu/run.sh to prove, without a
GPU or cuobjdump, that the build holds an image for every architecture NVCC_GENCODE lists."""
import struct
import subprocess
import sys
import tempfile

FATBIN_MAGIC = 0xBA55ED50


def archs(obj):
    with tempfile.NamedTemporaryFile() as t:
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", obj, t.name],
                       check=True)
        d = open(t.name, "rb").read()
    out, off = [], 0
    while off + 16 <= len(d):
        magic, _ver, hsz, fsz = struct.unpack_from("<IHHQ", d, off)
        if magic != FATBIN_MAGIC:
            break
        p, end = off + hsz, off + hsz + fsz
        while p < end:
            kind, _v, eh, padded = struct.unpack_from("<HHIQ", d, p)
            sm = struct.unpack_from("<I", d, p + 28)[0]
            out.append(("compute_%d" if kind == 1 else "sm_%d") % sm)
            p += eh + padded
        off = end
    return out


if __name__ == "__main__":
    found = archs(sys.argv[1])
    if not found:
        sys.exit("no .nv_fatbin device code in %s" % sys.argv[1])
    print(" ".join(found))
