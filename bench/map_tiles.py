"""A long text's head map through the HTTP API, as the page browses it: the page's first view
(/api/conclusion, /api/model_view), the head's first tile (/api/head, the last 256 × 256: it
makes the pass up to the head's layer), its overview (/api/overview, the whole map max-pooled
into 512 × 512 blocks), then tiles of 256 × 256 cells at random places (each new, so none is
served from the answers' cache) in that head and in another head of the same layer: as the page
asks for them (/api/overview of the window, one block per cell: its exact weights), and, for
comparison, as the whole head view of the window (/api/head: vectors, scores, member summaries).

Target (issue 19): a 256 × 256 tile arrives within 0.3 s once the head's first tile has (the
server keeps the run, study.page_run, and the run the layer's vectors). Prints the CPU, the
load average, p50 and p95, and the process's peak resident memory (the app runs in it).

    .venv/bin/python bench/map_tiles.py                  # the default model, T=2048, 20 tiles a head
    .venv/bin/python bench/map_tiles.py --T 8191 --tiles 10 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

import studygroup  # before torch: its thread policy (studygroup/__init__.py)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from long_explain import text_of  # noqa: E402
from silence_redraw import cpu, serve  # noqa: E402

TILE = 256


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--T", type=int, default=2048, help="members of the text (default 2048)")
    p.add_argument("--tiles", type=int, default=20, help="random tiles timed per head (default 20)")
    p.add_argument("--layer", type=int, default=20)
    p.add_argument("--head", type=int, default=4)
    p.add_argument("--json", default=None, metavar="FILE", help="also write the figures as JSON")
    return p.parse_args(argv)


def timed(client, base: str, path: str, body: dict) -> float:
    t = time.perf_counter()
    r = client.post(f"{base}/api/{path}", json=body)
    r.read()
    if r.status_code != 200:
        raise SystemExit(f"/api/{path} answered {r.status_code}: {r.text[:300]}")
    return time.perf_counter() - t


def quantiles(xs: list[float]) -> dict:
    s = sorted(xs)
    return {"p50": s[len(s) // 2], "p95": s[min(len(s) - 1, round(0.95 * (len(s) - 1)))], "n": len(s)}


def main(argv=None) -> dict:
    args = parse_args(argv)
    model = studygroup.load()
    import httpx

    from studygroup.web.app import create_app

    text = text_of(args.T)
    T = len(model.tokenize(text))
    base, _ = serve(create_app(model))
    rng = random.Random(0)
    out = {"T": T, "layer": args.layer}
    with httpx.Client(timeout=3600) as client:
        out["first_view_s"] = sum(timed(client, base, p, {"text": text}) for p in ("conclusion", "model_view"))
        head = {"text": text, "layer": args.layer, "head": args.head}
        out["first_tile_s"] = timed(client, base, "head", {**head, "rows": [-TILE, None], "keys": [-TILE, None]})
        out["overview_s"] = timed(client, base, "overview", head)
        seen = set()
        other = (args.head + 1) % model.config.n_heads
        for name, path, h in (("tiles_same_head", "overview", args.head), ("tiles_other_head", "overview", other),
                              ("head_views_same_head", "head", args.head)):
            times = []
            while len(times) < args.tiles:
                a, c = rng.randrange(0, T - TILE + 1), rng.randrange(0, T - TILE + 1)
                if (path, h, a, c) in seen:
                    continue
                seen.add((path, h, a, c))
                times.append(timed(client, base, path, {**head, "head": h, "rows": [a, a + TILE], "keys": [c, c + TILE]}))
            out[name] = quantiles(times)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["cpu"] = cpu()
    out["load_average"] = os.getloadavg()
    print(f"map_tiles: {model.config.name}, T={T}, layer {args.layer}; {out['cpu']}")
    print(f"  first view {out['first_view_s']:.2f} s, first tile {out['first_tile_s']:.2f} s, overview {out['overview_s']:.2f} s")
    for name, what in (("tiles_same_head", "tile (/api/overview, one block per cell: the page's)"),
                       ("tiles_other_head", "tile, another head of the layer"),
                       ("head_views_same_head", "whole head view of the window (/api/head: vectors, scores, members)")):
        q = out[name]
        print(f"  {what}: 256 x 256 p50 {q['p50']:.3f} s  p95 {q['p95']:.3f} s  ({q['n']}; target for tiles: under 0.300 s)")
    print(f"  peak resident memory {out['peak_rss_mib']:.0f} MiB; load average {out['load_average'][0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
