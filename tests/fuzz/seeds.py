#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/<target>/ (docs/FUZZING.md).

    tests/fuzz/seeds.py [--package DIR]

Without --package it writes the seeds that need nothing built: the planners' inputs (in
fuzz_input.hpp's number code), synthetic fatbins and URIs, and the spec seeds (specs/*.json and a
few hand-made specs). With --package (a built kernel package, e.g. from
`build/generator/aotinfer-gen build specs/ci.json -o /tmp/fz-ci` -> /tmp/fz-ci/package) it also
writes the manifest seeds, a small real fatbin and the package's URIs. Existing files of the same
names are replaced; other files (crash regressions) are kept.
"""
import argparse
import hashlib
import json
import random
import shutil
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CORPUS = HERE / "corpus"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


# ---- fuzz_input.hpp's number code -------------------------------------------------------------

def num(v):
    if 0 <= v < 0xC0:
        return bytes([v])
    if 0 <= v < 1 << 13:
        return bytes([0xC0 | v >> 8, v & 0xFF])
    if 0 <= v < 1 << 20:
        return bytes([0xE0 | v >> 16, v & 0xFF, (v >> 8) & 0xFF])
    if -(1 << 31) <= v < 1 << 31:
        return b"\xf0" + struct.pack("<i", v)
    return b"\xff" + struct.pack("<q", v)


def in_range(v, lo):
    """The encoding Input::in_range(lo, hi) reads back as v."""
    return num(v - lo)


def tile(v):
    """A power-of-two tile size (the planners' default form): its log2."""
    assert v > 0 and v & (v - 1) == 0
    return num(v.bit_length() - 1)


def deltas(indptr):
    """An indptr starting at 0 as its deltas (the planners' default, non-raw form)."""
    return b"".join(num(b - a) for a, b in zip(indptr, indptr[1:]))


def csr(lengths, page_size):
    indptr, last = [0], []
    for n in lengths:
        pages = (n + page_size - 1) // page_size
        indptr.append(indptr[-1] + pages)
        last.append(0 if pages == 0 else n - (pages - 1) * page_size)
    return indptr, last


# ---- decode -----------------------------------------------------------------------------------

def decode_seed(qo, kv, page_size, lengths, graph=False, max_batch=0, sms=132, ctas=2, tile_rows=4, tile_tokens=32,
                indices=False, last_override=None):
    indptr, last = csr(lengths, page_size)
    if last_override is not None:
        last = last_override
    flags = (1 if graph else 0) | (4 if indices else 0)
    out = bytes([flags]) + num(qo) + num(kv) + num(page_size) + num(max_batch)
    out += in_range(sms, 1) + in_range(ctas, 1) + in_range(tile_rows, 1) + tile(tile_tokens)
    out += num(len(lengths)) + deltas(indptr) + b"".join(num(x) for x in last)
    num_pages = indptr[-1] + 3
    out += num(num_pages)
    if indices:
        ids = list(range(indptr[-1]))
        random.Random(7).shuffle(ids)
        out += b"".join(num(x) for x in ids)
    return out


def decode_seeds():
    rnd = random.Random(1)
    yield "small_batch", decode_seed(32, 8, 16, [40, 160, 0, 1])
    yield "one_long_request", decode_seed(32, 8, 16, [100000])
    yield "wave_of_requests", decode_seed(8, 8, 16, [rnd.randint(0, 5000) for _ in range(300)], sms=16, ctas=1)
    yield "graph", decode_seed(64, 8, 16, [3000, 7, 0], graph=True, max_batch=8)
    yield "graph_full", decode_seed(32, 32, 1, [rnd.randint(0, 70) for _ in range(16)], graph=True, max_batch=16, tile_tokens=16)
    yield "page_ids", decode_seed(16, 2, 8, [9, 30, 64, 1], indices=True)
    yield "skewed", decode_seed(4, 1, 32, [rnd.randint(0, 300) for _ in range(20)] + [200000], sms=108, ctas=3, tile_tokens=64)
    yield "bad_last_page_len", decode_seed(32, 8, 16, [40, 16], last_override=[0, 16])
    yield "mqa_group64", decode_seed(64, 1, 64, [5000, 12000], tile_rows=8, tile_tokens=128)


# ---- prefill ----------------------------------------------------------------------------------

def prefill_seed(qo_heads, kv_heads, qo_lens, kv_lens, causal=True, paged=False, page_size=16, graph=False, max_batch=0,
                 max_total_q=0, sms=132, large=(128, 1), small=(64, 2), kv_tile=64, indices=False):
    flags = (1 if graph else 0) | (2 if causal else 0) | (4 if paged else 0) | (32 if indices else 0)
    out = bytes([flags, 0]) + num(qo_heads) + num(kv_heads) + num(page_size) + num(max_batch) + num(max_total_q)
    out += in_range(sms, 1) + in_range(large[0], 1) + in_range(large[1], 1) + in_range(small[0], 1) + in_range(small[1], 1)
    out += tile(kv_tile)
    out += num(len(qo_lens))
    qo_indptr = [0]
    for n in qo_lens:
        qo_indptr.append(qo_indptr[-1] + n)
    out += deltas(qo_indptr)
    if paged:
        indptr, last = csr(kv_lens, page_size)
        out += deltas(indptr) + b"".join(num(x) for x in last) + num(indptr[-1] + 1)
        if indices:
            out += b"".join(num(x) for x in range(indptr[-1]))
    else:
        kv_indptr = [0]
        for n in kv_lens:
            kv_indptr.append(kv_indptr[-1] + n)
        out += deltas(kv_indptr)
    return out


def prefill_seeds():
    rnd = random.Random(2)
    yield "ragged_causal_prompt", prefill_seed(32, 8, [500], [500])
    yield "ragged_prefix_split", prefill_seed(32, 8, [40], [9000])
    yield "ragged_mixed", prefill_seed(8, 8, [rnd.randint(0, 600) for _ in range(12)], [5000] * 12, causal=False)
    qo = [rnd.randint(1, 40) for _ in range(10)]
    yield "paged_chunked", prefill_seed(16, 2, qo, [q + rnd.randint(0, 3000) for q in qo], paged=True, indices=True)
    yield "paged_noncausal", prefill_seed(4, 4, [1, 2, 0, 7], [0, 64, 100, 31], causal=False, paged=True, page_size=1)
    yield "graph", prefill_seed(32, 8, [100, 3], [900, 3], graph=True, max_batch=4, max_total_q=2048)
    yield "graph_small", prefill_seed(8, 1, [1], [4000], graph=True, max_batch=1, max_total_q=1, sms=8)
    yield "tiny_tiles", prefill_seed(6, 3, [5, 9, 0], [20, 9, 3], large=(16, 4), small=(8, 8), kv_tile=16, sms=20)
    yield "empty_batch", prefill_seed(2, 1, [], [])
    yield "causal_refused", prefill_seed(2, 1, [10], [5])


# ---- fatbins ----------------------------------------------------------------------------------

def fatbin(containers):
    """containers: lists of (kind, arch, flags, payload); nvcc 13's layout (runtime/src/core/fatbin.cpp)."""
    out = b""
    for entries in containers:
        body = b""
        for kind, arch, flags, payload in entries:
            header = struct.pack("<HHIQ", kind, 0x0101, 64, len(payload))
            header += struct.pack("<QIIIIQ", len(payload), 0x00010008, arch, 0, 0, flags)  # arch at +28, flags at +40
            header += b"\0" * (64 - len(header))
            body += header + payload
        out += struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body
    return out


def fatbin_seeds():
    elf, ptx = 2, 1
    compressed, specific = 0x8000 | 0x11, 0x100000
    yield "synthetic_sass_ptx.fatbin", fatbin([[(elf, 80, compressed, b"\x7fELF" + b"\0" * 60),
                                                 (ptx, 90, 0x11, b".version 9.0\n.target sm_90\n\0\0\0")]])
    yield "synthetic_arch_specific.fatbin", fatbin([[(elf, 90, compressed | specific, b"x" * 16)], [(elf, 100, 0x11, b"")]])
    yield "synthetic_ptx_only.fatbin", fatbin([[(ptx, 75, 0, b"ptx")]])
    yield "synthetic_truncated.fatbin", fatbin([[(elf, 120, 0x11, b"y" * 40)]])[:70]


# ---- URIs -------------------------------------------------------------------------------------

URIS = [
    "merge_state.dtype-bf16.head_dim-128",
    "batch_decode.dtype_q-bf16.dtype_kv-e4m3.head_dim-128.dtype_o-bf16.pos_encoding-rope_llama.sliding_window-false.soft_cap-true",
    "toy.window--1.count-0.big-9223372036854775807.small--9223372036854775808",
    "family",
    "bad..uri\nfamily.axis-Value\nf.a-1.a-2\nf.a_-1\nf.a-01\nf.a--0\nf.-1\nf.a-\n.x-1\nf.a-b-c",
]


# ---- specs ------------------------------------------------------------------------------------

TOY_SPECS = {
    "toy_matrix.json": {"format": 1, "package": {"name": "toy", "version": "1"}, "archs": ["sm_90a", "sm_80"],
                        "families": {"toy": {"matrix": {"dtype": ["f16", "bf16"], "head_dim": [64, -1], "soft_cap": True},
                                             "exclude": [{"dtype": "bf16", "head_dim": -1}],
                                             "include": [{"dtype": "bf16", "dtype_o": "f32", "head_dim": 256, "mask": "causal"}]}}},
    "narrow_follower.json": {"format": 1, "package": {"name": "narrow", "version": "0.1"}, "archs": ["sm_120a"],
                             "families": {"narrow": {"matrix": {"dtype": "bf16", "head_dim": 128}}}},
}


def spec_seeds():
    for path in sorted((ROOT / "specs").glob("*.json")):
        if path.name != "schema.json":
            yield path.name, path.read_bytes()
    for name, spec in TOY_SPECS.items():
        yield name, json.dumps(spec, indent=1)
    yield "malformed.json", '{"format": 1, "package": {"name": "x", "version": "1"}, "archs": ["sm_90"], "families": {"merge_state": '


# ---- manifests (need a built package) ---------------------------------------------------------

def manifest_seeds(package):
    manifest = json.loads((package / "manifest.json").read_text())
    yield "package.json", (package / "manifest.json").read_bytes()
    # The smallest variant alone, its file renamed to the one fuzz_manifest writes, with the bytes.
    files = sorted(manifest["variants"], key=lambda v: (package / v["file"]).stat().st_size)
    v = dict(files[0])
    data = (package / v["file"]).read_bytes()
    v.update(file="kernels/a.fatbin", size=len(data), sha256=hashlib.sha256(data).hexdigest())
    one = dict(manifest, variants=[v])
    yield "one_variant_with_file", json.dumps(one, indent=2).encode() + b"\0" + data
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0xFF
    yield "one_variant_damaged_file", json.dumps(one, indent=2).encode() + b"\0" + bytes(damaged)
    two = dict(manifest, variants=[v, dict(v)])
    yield "duplicate_uri.json", json.dumps(two)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", type=Path, help="a built kernel package (manifest seeds, a real fatbin, its URIs)")
    args = parser.parse_args()
    for name, data in decode_seeds():
        write("decode_plan", name, data)
    for name, data in prefill_seeds():
        write("prefill_plan", name, data)
    for name, data in fatbin_seeds():
        write("fatbin", name, data)
    for i, uri in enumerate(URIS):
        write("uri", f"uri_{i}", uri)
    for name, data in spec_seeds():
        write("spec", name, data)
    if args.package:
        for name, data in manifest_seeds(args.package):
            write("manifest", name, data)
        smallest = min((args.package / "kernels").glob("*.fatbin"), key=lambda p: p.stat().st_size)
        if smallest.stat().st_size <= 40 * 1024:
            shutil.copyfile(smallest, CORPUS / "fatbin" / "real_smallest.fatbin")
        uris = [v["uri"] for v in json.loads((args.package / "manifest.json").read_text())["variants"]]
        write("uri", "package_uris", "\n".join(uris))


if __name__ == "__main__":
    main()
