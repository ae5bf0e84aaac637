#!/usr/bin/env python3
"""Draws scale_bench's JSON (costs at scale, issue 31) as two SVG charts, log-log, one line per
cost, with a dashed flat reference: a cost that grows with the structure's size climbs away
from it. No plotting library: plain SVG.

  build/bin/scale_bench > scale.json
  python3 bench/plot_scale.py scale.json OUT_DIR     # OUT_DIR/block_manager.svg, OUT_DIR/router.svg
"""
import json
import math
import os
import sys

W, H, L, R, T, B = 640, 360, 70, 170, 30, 50
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def chart(title, xlabel, ylabel, xs, series, path):
    xmin, xmax = math.log10(min(xs)), math.log10(max(xs))
    ys = [y for _, vals in series for y in vals if y > 0]
    ymin, ymax = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    if ymax == ymin:
        ymax += 1
    px = lambda x: L + (math.log10(x) - xmin) / max(1e-9, xmax - xmin) * (W - L - R)
    py = lambda y: H - B - (math.log10(y) - ymin) / (ymax - ymin) * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
           f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">{xlabel}</text>',
           f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 16 {(T + H - B) / 2})">{ylabel}</text>']
    for x in xs:
        out.append(f'<text x="{px(x):.1f}" y="{H - B + 16}" text-anchor="middle">{x:g}</text>')
    for e in range(ymin, ymax + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{L - 4}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 8}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
    for i, (name, vals) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, vals) if y > 0)
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
        first = next(y for y in vals if y > 0)
        out.append(f'<line x1="{px(xs[0]):.1f}" y1="{py(first):.1f}" x2="{px(xs[-1]):.1f}" y2="{py(first):.1f}" '
                   f'stroke="{c}" stroke-dasharray="4 4" stroke-width="1"/>')
        for x, y in zip(xs, vals):
            if y > 0:
                out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>')
        out.append(f'<text x="{W - R + 8}" y="{T + 16 + 18 * i}" fill="{c}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    data = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    bm = data["block_manager"]
    chart("Block manager: cost per op vs pool size (flat = O(work))", "pool blocks", "µs per op / bytes per block",
          [r["blocks"] for r in bm],
          [("match 64 blocks (µs)", [r["match_us"] for r in bm]),
           ("admit 1,024 tokens (µs)", [r["admit_us"] for r in bm]),
           ("bytes per block", [r["bytes_per_block"] for r in bm])],
          os.path.join(out, "block_manager.svg"))
    rt = data["router"]
    chart("Router: kv-aware routing cost vs workers (100,000 blocks each)", "workers", "µs",
          [r["workers"] for r in rt],
          [("per request (µs)", [r["route_us"] for r in rt]),
           ("per request per worker (µs)", [r["route_us_per_worker"] for r in rt])] +
          ([("probing each worker (µs)", [r["probe_each_worker_us"] for r in rt])]
           if all("probe_each_worker_us" in r for r in rt) else []),
          os.path.join(out, "router.svg"))


if __name__ == "__main__":
    main()
