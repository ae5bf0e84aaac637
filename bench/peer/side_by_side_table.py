#!/usr/bin/env python3
"""Prints the markdown tables of a bench/peer/side_by_side.sh run (medians over rounds, ratios,
rooflines) and writes curve.svg (decode t/s against context length) into the run's folder.

    python3 bench/peer/side_by_side_table.py OUT_DIR

Rooflines: decode = read bandwidth (membw.json, 2 threads) / (weight bytes read per token + the
f16 KV bytes read at that depth); prefill and batched = FLOPs / the measured peak in
peak.json, if there: for the f16 model's prefill the weight GEMMs at the bf16 peak
(vdpbf16ps: Pagoda's prefill path for f16 weights) and attention at the f32 FMA peak; its
16-sequence row's prompts at the bf16 peak and its decode steps at the f32 peak (Pagoda's
decode steps stay f32), or at the bf16 peak with --batched-bf16 (meta batched_bf16), each step
no faster than reading the weights once at the read bandwidth; the int8 VNNI peak
(vpdpbusd) for the quantized models' prefill, which both engines run as int8 dot products. Weight bytes: every tensor of the
GGUF file but token_embd (one row of it is read per token) unless it doubles as the output.
"""
import glob
import json
import os
import re
import statistics
import struct
import sys

GGML_SIZES = {0: (4, 1), 1: (2, 1), 2: (18, 32), 3: (20, 32), 6: (22, 32), 7: (24, 32), 8: (34, 32), 9: (36, 32),
              10: (84, 256), 11: (110, 256), 12: (144, 256), 13: (176, 256), 14: (210, 256), 15: (292, 256), 30: (2, 1)}


def read_gguf(path):
    """(metadata dict, [(name, dims, type)]) of a GGUF v2/v3 file."""
    with open(path, "rb") as f:
        data = f.read(16 << 20)
    off = 0

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, data, off)
        off += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal off
        n = take("Q")
        s = data[off:off + n].decode("utf-8", "replace")
        off += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t in scalar:
            return take(scalar[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            if et in scalar and n > 64:  # skip long arrays (vocabularies) quickly
                nonlocal off
                off += n * struct.calcsize("<" + scalar[et])
                return None
            return [value(et) for _ in range(n)]
        raise ValueError(f"GGUF value type {t}")

    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not GGUF")
    off = 4
    take("I")
    n_tensors, n_kv = take("Q"), take("Q")
    meta = {}
    for _ in range(n_kv):
        k = string()
        meta[k] = value(take("I"))
    tensors = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        t = take("I")
        take("Q")
        tensors.append((name, dims, t))
    return meta, tensors


def model_facts(path):
    meta, tensors = read_gguf(path)
    arch = meta["general.architecture"]
    n_layer = meta[f"{arch}.block_count"]
    n_head = meta[f"{arch}.attention.head_count"]
    n_kv = meta.get(f"{arch}.attention.head_count_kv", n_head)
    emb = meta[f"{arch}.embedding_length"]
    hd = meta.get(f"{arch}.attention.key_length", emb // n_head)
    names = {t[0] for t in tensors}
    tied = "output.weight" not in names
    weight_bytes = 0
    matmul_params = 0
    for name, dims, t in tensors:
        elems = 1
        for d in dims:
            elems *= d
        size, block = GGML_SIZES.get(t, (4, 1))
        nbytes = elems // block * size
        if name == "token_embd.weight" and not tied:
            weight_bytes += nbytes // dims[1] if len(dims) > 1 else 0
            continue
        weight_bytes += nbytes
        if len(dims) == 2:
            matmul_params += elems
    return {"n_layer": n_layer, "n_head": n_head, "n_kv": n_kv, "hd": hd, "weight_bytes": weight_bytes,
            "matmul_params": matmul_params}


def load(path):
    with open(path) as f:
        return json.load(f)


def llama_ts(path):
    rows = load(path)
    return rows[0]["avg_ts"]


def med(xs):
    return statistics.median(xs) if xs else None


PAIRS = {}  # (row, suffix) -> [(pagoda, llama)] of the rounds both sides finished


def round_of(path):
    m = re.search(r"\.r(\d+)[.]", os.path.basename(path))
    return int(m.group(1)) if m else -1


def collect(out, row, fn_pagoda, fn_llama, suffix=""):
    p, l = {}, {}
    data = lambda f: f.endswith((".json", ".jsonl", ".txt"))
    for f in sorted(filter(data, glob.glob(os.path.join(out, f"{row}.r*{suffix}.pagoda.*")))):
        p[round_of(f)] = fn_pagoda(f)
    for f in sorted(filter(data, glob.glob(os.path.join(out, f"{row}.r*{suffix}.llama.*")))):
        l[round_of(f)] = fn_llama(f)
    PAIRS[(row, suffix)] = [(p[r], l[r]) for r in sorted(p) if r in l and p[r] and l[r]]
    return med(list(p.values())), med(list(l.values())), len(p)


def paired(row, higher_better=True, suffix=""):
    """The median of the per-round ratios Pagoda / llama.cpp (higher is better) and their min-max."""
    rs = [(a / b if higher_better else b / a) for a, b in PAIRS.get((row, suffix), [])]
    if not rs:
        return None, ""
    return statistics.median(rs), f"{min(rs):.2f}–{max(rs):.2f}, {len(rs)} rounds"


def serving_seconds(path):
    for line in open(path):
        parts = line.split()
        if parts and parts[0] == "16":
            return float(parts[1])
    raise ValueError(f"{path}: no max_num_seqs 16 line")


def batched_seconds(path):
    for line in open(path):
        if line.strip().startswith("{"):
            return json.loads(line)["t"]
    raise ValueError(f"{path}: no jsonl line")


def main():
    out = sys.argv[1]
    meta = load(os.path.join(out, "meta.json"))
    bw = None
    if os.path.exists(os.path.join(out, "membw.json")):
        try:
            mb = load(os.path.join(out, "membw.json"))
            bw = mb["gbps"]["read"]["2"]
        except (ValueError, KeyError):
            bw = None
    peak = load(os.path.join(out, "peak.json")) if os.path.exists(os.path.join(out, "peak.json")) else {}
    # The AVX2 kernels' roof is the 256-bit FMA peak (--isa avx2, or a CPU without AVX-512);
    # there the int8 and bf16 paths do not run either.
    avx2 = meta.get("isa") == "avx2" or not peak.get("f32_fma_gflops")
    f32_peak = peak.get("f32_fma_avx2_gflops") if avx2 else peak.get("f32_fma_gflops")
    int8_peak = (None if avx2 else peak.get("int8_vnni_gops")) or f32_peak
    bf16_peak = (None if avx2 else peak.get("bf16_dp_gflops")) or f32_peak
    models = {}
    for key, name in (("m110", "llama-110m-f16"), ("q8", "tinyllama-1.1b-q8_0"), ("q4", "tinyllama-1.1b-q4_k_m"),
                      ("g3", "gemma3-270m-f16")):
        path = os.path.join(os.environ.get("MODEL_DIR", "/work/models"), name + ".gguf")
        if os.path.exists(path):
            models[key] = model_facts(path)
    print(f"Native llama.cpp {meta['llama_cpp_commit']} vs Pagoda {meta['pagoda_commit']}, ISA {meta.get('isa', 'best')}, "
          f"CPU {meta.get('cpu', '?')}, {meta['threads']} threads, "
          f"median of {meta['rounds']} interleaved rounds, Pagoda KV {meta['pagoda_kv']}, llama.cpp KV f16, "
          f"{'Pagoda --batched-bf16 in the 16-sequence rows, ' if meta.get('batched_bf16') else ''}"
          f"Pagoda --matmul-precision {meta.get('matmul_precision', 'auto')}, "
          f"{meta['date']}; read bandwidth {bw if bw else '?'} GB/s, f32 FMA peak {f32_peak or '?'} GFLOP/s"
          + ("" if avx2 else f", bf16 peak {bf16_peak or '?'} GFLOP/s, int8 VNNI peak {int8_peak or '?'} GOP/s") + "\n")
    print("| work (same GGUF) | llama.cpp native | Pagoda | ratio | roofline | Pagoda % of roofline |")
    print("|---|---:|---:|---:|---:|---:|")

    def kv_bytes(m, depth):
        return 2 * m["n_layer"] * depth * m["n_kv"] * m["hd"] * 2

    def flops_per_token(m, ctx):
        return 2 * m["matmul_params"] + 4 * m["n_layer"] * m["n_head"] * m["hd"] * ctx

    def seconds_per_token(m, ctx, matmul_peak):
        # weight GEMMs at matmul_peak, attention (f32) at the f32 FMA peak
        return (2 * m["matmul_params"] / (matmul_peak * 1e9) +
                4 * m["n_layer"] * m["n_head"] * m["hd"] * ctx / (f32_peak * 1e9))

    def line(label, lv, pv, unit, roof=None, higher_better=True, row=None):
        if lv is None or pv is None:
            return
        ratio, spread = paired(row, higher_better) if row else (None, "")
        if ratio is None:
            ratio = pv / lv if higher_better else lv / pv
        roof_s = f"{roof:.0f} {unit}" if roof else "—"
        pct = f"{100 * pv / roof:.0f}%" if roof and higher_better else (f"{100 * roof / pv:.0f}%" if roof else "—")
        print(f"| {label} | {lv:.1f} {unit} | {pv:.1f} | **{ratio:.2f}×** ({spread}) | {roof_s} | {pct} |")

    m = models.get("m110")
    get_pp = lambda f: load(f)["prefill_tps"]
    get_tg = lambda f: load(f)["decode_tps"]
    for row, label, n, is_pp, depth in (("pp512", "llama-110m f16 pp512", 512, True, 0),
                                        ("tg128", "llama-110m f16 tg128", 128, False, 0),
                                        ("pp1900", "llama-110m f16 prefill of a 1,900-token prompt", 1900, True, 0),
                                        ("tg128d1900", "llama-110m f16 decode at depth 1,900", 128, False, 1900),
                                        ("pp512_q8", "llama-110m q8_0 pp512", 512, True, 0),
                                        ("pp512_q4km", "llama-110m q4_k_m pp512", 512, True, 0)):
        p, l, _ = collect(out, row, get_pp if is_pp else get_tg, llama_ts)
        roof = None
        if m and is_pp and f32_peak and "_q" not in row:  # int8 rows: no float roofline applies
            roof = 1 / seconds_per_token(m, (n + 1) / 2, bf16_peak)
        if m and not is_pp and bw:
            roof = bw * 1e9 / (m["weight_bytes"] + kv_bytes(m, depth + n / 2))
        line(label, l, p, "t/s", roof, row=row)
    g3 = models.get("g3")
    for row, label, n, is_pp in (("g3_pp512", "gemma3-270m f16 pp512", 512, True),
                                 ("g3_tg128", "gemma3-270m f16 tg128", 128, False)):
        p, l, _ = collect(out, row, get_pp if is_pp else get_tg, llama_ts)
        roof = None
        if g3 and is_pp and f32_peak:
            roof = 1 / seconds_per_token(g3, (n + 1) / 2, bf16_peak)
        if g3 and not is_pp and bw:
            roof = bw * 1e9 / (g3["weight_bytes"] + kv_bytes(g3, n / 2))
        line(label, l, p, "t/s", roof, row=row)
    p, l, _ = collect(out, "batched16", serving_seconds, batched_seconds)
    if p and l:
        roof_s = None
        if m and f32_peak:  # prompts (64 tokens each) in bf16; decode steps in f32, or bf16 with --batched-bf16
            step_peak = bf16_peak if meta.get("batched_bf16") else f32_peak
            # each of the 64 decode steps reads every weight once: the slower of its FLOPs and its bytes
            step_s = 16 * seconds_per_token(m, 96, step_peak)
            if bw:
                step_s = max(step_s, m["weight_bytes"] / (bw * 1e9))
            roof_s = 16 * 64 * seconds_per_token(m, 32, bf16_peak) + 64 * step_s
        pct = f"{100 * roof_s / p:.0f}%" if roof_s else "—"
        rs = f"{roof_s:.2f} s" if roof_s else "—"
        ratio, spread = paired("batched16", higher_better=False)
        print(f"| llama-110m f16, 16 sequences × (64 prompt + 64 generated), in process | {l:.2f} s (`llama-batched-bench`) "
              f"| {p:.2f} s (`serving_bench`) | **{ratio:.2f}×** ({spread}) | {rs} | {pct} |")
    # Every request asks for 64 tokens (ignore_eos), and llama-server fails some random-weight
    # replies only at their very end (its chat parser on a reply cut inside a UTF-8 character),
    # after generating all of them: failed requests count as full replies.
    def tps(f):
        s = load(f)["summary"]
        return s["output_tokens_per_s"] * s["requests"] / s["succeeded"] if s["succeeded"] else None
    itl = lambda f: load(f)["summary"]["itl_ms"]["p99"]
    p, l, _ = collect(out, "http16", tps, tps)
    pi, li, _ = collect(out, "http16", itl, itl)
    if p and l:
        collect(out, "http16", tps, tps)  # (the ITL collect above replaced the pairs)
        ratio, spread = paired("http16")
        print(f"| same file over HTTP, `bench-serve --concurrency 16 --num-requests 48 --prompt-len 64 --output-len 64` "
              f"| `llama-server -np 16`: {l:.1f} output tok/s, ITL p99 {li:.0f} ms | {p:.1f} tok/s, ITL p99 {pi:.0f} ms "
              f"| **{ratio:.2f}×** ({spread}), ITL p99 {pi / li:.2f}× of llama.cpp's | — | — |")
    for key, row, label in (("q8", "tl_q8", "tinyllama-1.1b q8_0"), ("q4", "tl_q4km", "tinyllama-1.1b q4_k_m")):
        pp = collect(out, row, get_pp, lambda f: [r for r in load(f) if r["n_prompt"] > 0][0]["avg_ts"])
        tg = collect(out, row, get_tg, lambda f: [r for r in load(f) if r["n_gen"] > 0][0]["avg_ts"])
        mm = models.get(key)
        roof_pp = int8_peak * 1e9 / flops_per_token(mm, 128) if mm and int8_peak else None
        roof_tg = bw * 1e9 / (mm["weight_bytes"] + kv_bytes(mm, 32)) if mm and bw else None
        collect(out, row, get_pp, lambda f: [r for r in load(f) if r["n_prompt"] > 0][0]["avg_ts"])
        line(f"{label} pp256", pp[1], pp[0], "t/s", roof_pp, row=row)
        collect(out, row, get_tg, lambda f: [r for r in load(f) if r["n_gen"] > 0][0]["avg_ts"])
        line(f"{label} tg64", tg[1], tg[0], "t/s", roof_tg, row=row)

    depths = [0, 256, 512, 1024, 1536, 2000]
    curve = []
    for d in depths:
        p, l, _ = collect(out, "curve", get_tg, llama_ts, suffix=f".d{d}")
        if p and l:
            curve.append((d, p, l))
    if curve:
        print("\nDecode t/s (tg32) against context depth, llama-110m f16:\n")
        print("| depth | llama.cpp | Pagoda | ratio | roofline |")
        print("|---:|---:|---:|---:|---:|")
        for d, p, l in curve:
            roof = bw * 1e9 / (m["weight_bytes"] + kv_bytes(m, d + 16)) if m and bw else None
            print(f"| {d} | {l:.1f} | {p:.1f} | {p / l:.2f}× | {roof:.0f} |" if roof else f"| {d} | {l:.1f} | {p:.1f} | {p / l:.2f}× | — |")
        write_svg(os.path.join(out, "curve.svg"), curve, m, bw, kv_bytes)


def write_svg(path, curve, m, bw, kv_bytes):
    w, h, left, bottom, top, right = 640, 400, 60, 50, 30, 150
    xmax = max(d for d, _, _ in curve) or 1
    ymax = max(max(p, l) for _, p, l in curve) * 1.15
    if m and bw:
        ymax = max(ymax, bw * 1e9 / m["weight_bytes"] * 1.05)
    sx = lambda d: left + (w - left - right) * d / xmax
    sy = lambda v: h - bottom - (h - bottom - top) * v / ymax
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{left}" y="18" font-size="14">Decode tokens/s vs context depth, llama-110m f16, 2 threads</text>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>']
    for i in range(6):
        v = ymax * i / 5
        parts.append(f'<text x="{left - 8}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
        parts.append(f'<line x1="{left}" y1="{sy(v):.1f}" x2="{w - right}" y2="{sy(v):.1f}" stroke="#eee"/>')
    for d, _, _ in curve:
        parts.append(f'<text x="{sx(d):.1f}" y="{h - bottom + 18}" text-anchor="middle">{d}</text>')
    parts.append(f'<text x="{(left + w - right) / 2}" y="{h - 10}" text-anchor="middle">tokens in the KV cache</text>')
    series = [("Pagoda", "#d62728", [(d, p) for d, p, _ in curve]), ("llama.cpp", "#1f77b4", [(d, l) for d, _, l in curve])]
    if m and bw:
        roof = [(d, bw * 1e9 / (m["weight_bytes"] + kv_bytes(m, d + 16))) for d, _, _ in curve]
        series.append(("bandwidth roofline", "#999", roof))
    for i, (name, color, pts) in enumerate(series):
        dash = ' stroke-dasharray="5,4"' if name.startswith("bandwidth") else ""
        path_d = " ".join(f"{'M' if j == 0 else 'L'}{sx(d):.1f},{sy(v):.1f}" for j, (d, v) in enumerate(pts))
        parts.append(f'<path d="{path_d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for d, v in pts:
            parts.append(f'<circle cx="{sx(d):.1f}" cy="{sy(v):.1f}" r="3" fill="{color}"/>')
        parts.append(f'<text x="{w - right + 10}" y="{top + 20 + 18 * i}" fill="{color}">{name}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
