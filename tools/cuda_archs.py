#!/usr/bin/env python3
"""What GPU code an ELF file carries, read from its own bytes (no cuobjdump needed).

    tools/cuda_archs.py BINARY                       list each fatbinary's machine code and PTX
    tools/cuda_archs.py BINARY --expect "sm_75 ... compute_120" [--runpath-excludes /usr/local/cuda]

nvcc puts the device code of every .cu file in the `.nv_fatbin` section as one fatbinary
container: a 16-byte header (magic 0xBA55ED50, version, header size, payload size) and then
entries, each with its own header: kind (1 PTX, 2 ELF machine code), header size, payload size,
and at offset 28 the architecture (75 for sm_75 / compute_75). Entries may be compressed; the
headers never are.

With --expect, exit 1 unless every container that holds machine code holds each listed
architecture (sm_XY as machine code, compute_XY as PTX), and unless the RUNPATH avoids every
--runpath-excludes prefix. The build:cuda_archs test runs it on dlrun (docs/development.md).
"""
import argparse
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "compute", 2: "sm"}
DT_RUNPATH, DT_RPATH, DT_STRTAB = 29, 15, 5


def sections(data):
    """{name: (file offset, size, address)} of a little-endian ELF64 file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]
    out = {}
    for name_off, _type, _flags, addr, off, size, *_ in heads:
        start = names_at + name_off
        out[data[start:data.index(b"\0", start)].decode()] = (off, size, addr)
    return out


def fatbin_containers(data):
    """Each container's entries as sorted lists of "sm_XY" / "compute_XY"."""
    sec = sections(data).get(".nv_fatbin")
    if sec is None:
        return []
    blob = data[sec[0]:sec[0] + sec[1]]
    out, off = [], 0
    while off + 16 <= len(blob):
        magic, _version, header, size = struct.unpack_from("<IHHQ", blob, off)
        if magic != FATBIN_MAGIC:  # containers are aligned; padding between them
            off += 8
            continue
        entry, end, found = off + header, off + header + size, set()
        while entry + 32 <= end:
            kind, _v, entry_header, payload = struct.unpack_from("<HHIQ", blob, entry)
            arch, = struct.unpack_from("<I", blob, entry + 28)
            if entry_header == 0:
                raise ValueError(f"malformed fatbinary entry at {sec[0] + entry:#x}")
            found.add(f"{KINDS.get(kind, f'kind{kind}')}_{arch}")
            entry += entry_header + payload
        out.append(sorted(found, key=lambda a: (a.split("_")[0], int(a.split("_")[1]))))
        off = end
    return out


def runpath(data):
    """The DT_RUNPATH (or DT_RPATH) string, "" when there is none."""
    secs = sections(data)
    if ".dynamic" not in secs or ".dynstr" not in secs:
        return ""
    off, size, _ = secs[".dynamic"]
    strtab = secs[".dynstr"][0]
    for i in range(0, size, 16):
        tag, val = struct.unpack_from("<qQ", data, off + i)
        if tag in (DT_RUNPATH, DT_RPATH):
            return data[strtab + val:data.index(b"\0", strtab + val)].decode()
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--expect", help='architectures every container must hold, e.g. "sm_75 sm_90 compute_90"')
    ap.add_argument("--runpath-excludes", action="append", default=[], help="a prefix no RUNPATH entry may have")
    a = ap.parse_args()
    data = open(a.binary, "rb").read()
    containers = fatbin_containers(data)
    rp = runpath(data)
    print(f"{a.binary}: {len(containers)} fatbinary container(s); RUNPATH {rp or '(none)'}")
    for i, c in enumerate(containers):
        print(f"  container {i}: {' '.join(c) or '(empty)'}")
    problems = []
    if a.expect is not None:
        # The entry headers carry the architecture's number only: sm_90a is compared as sm_90.
        want = [w.rstrip("af") for w in a.expect.replace(";", " ").split()]
        with_code = [c for c in containers if any(x.startswith("sm_") for x in c)]
        if not with_code:
            problems.append("no fatbinary with machine code: the CUDA kernels were not compiled in")
        for i, c in enumerate(with_code):
            missing = [w for w in want if w not in c]
            if missing:
                problems.append(f"container {i} lacks {' '.join(missing)} (has {' '.join(c)})")
    for prefix in a.runpath_excludes:
        bad = [d for d in rp.split(":") if d and d.startswith(prefix)]
        if bad:
            problems.append(f"RUNPATH names {':'.join(bad)} (under {prefix})")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
