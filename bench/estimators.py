"""How well estimates of every head's silence_effect pick the heads explain measures, against the
exact silence_effect of all 270 heads, on texts of 10, 47 and 300 members.

    .venv/bin/python bench/estimators.py --out bench/results/

Estimates (each -∂ log p(t)/∂g of the gate g on each head's write, t the predicted word):
- `first_order`: at every gate 1 (one backward pass; explain's `silence_estimate`);
- `path_mean_N`: the mean over N points α = (k - 1/2)/N, k = 1..N, of the gradient with every
  gate at α together (Riemann integrated gradients along the path from all gates 1 to all 0;
  N copies in one batched pass, one backward).
For each: the largest |estimate - exact|, Spearman's rank correlation of |estimate| with |exact|,
and how many of the true top-5 heads (by |exact|) explain's stopping rule would leave untested
(candidates alternately by |direct contribution| and |estimate|, until the first head where
STOP_AFTER in a row fall below half the fifth-largest exact effect), with how many it tests.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explain_complete import ARTICLE, commit, cpu, save  # noqa: E402
from long_explain import text_of  # noqa: E402


def path_mean(model, ids: list[int], token: int, n: int):
    """-mean over α = (k - 1/2)/n of ∂ log p(token)/∂g at every gate = α: (n_layers, n_heads)."""
    import torch
    from studygroup.model.interventions import PassPlan
    from studygroup.study.effects import log_probs
    c = model.config
    alphas = torch.tensor([(k + 0.5) / n for k in range(n)])
    with torch.enable_grad():
        gates = {l: alphas[:, None].repeat(1, c.n_heads).requires_grad_() for l in range(c.n_layers)}  # (n, H)
        logits, _ = model.forward(torch.tensor(ids), PassPlan(gates=gates))  # (n, 1, vocab)
        log_probs(logits[:, -1])[:, token].sum().backward()
    return -torch.stack([gates[l].grad.mean(0) for l in range(c.n_layers)]).float()  # (L, H)


def stopping_rule(order, exact: dict) -> list:
    """The heads explain's default tests, in `order`, given every head's exact effect."""
    import torch
    from studygroup.study.explain import measured_heads
    effects = lambda heads: torch.tensor([exact[p] for p in heads], dtype=torch.float64)  # noqa: E731  (log p(t) = 0)
    return measured_heads(order, None, 10**9, 0.0, effects)[0]  # a text past HEADS_ALL_MAX_T


def spearman(a, b) -> float:
    ra, rb = (x.argsort().argsort().double() for x in (a, b))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


def judge(estimate, exact_grid, direct) -> dict:
    from studygroup.study.explain import candidates
    from studygroup.study.ranking import heads_largest_first
    L, H = exact_grid.shape
    exact = {(l, h): float(exact_grid[l, h]) for l in range(L) for h in range(H)}
    tested = stopping_rule(candidates(direct, estimate, L * H), exact)
    top5 = heads_largest_first(exact_grid)[:5]
    return {"max_abs_error": round(float((estimate - exact_grid).abs().max()), 4),
            "spearman_abs": round(spearman(estimate.abs().flatten(), exact_grid.abs().flatten()), 3),
            "wrong_sign_in_top5": sum(float(estimate[p]) * exact[p] < 0 for p in top5),
            "tested": len(tested), "top5_missed": [list(p) for p in top5 if p not in tested]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, nargs="+", default=[10, 47, 300])
    ap.add_argument("--points", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import studygroup
    model = studygroup.load()
    from studygroup.study import attribution, effects, explain
    from studygroup.study.ranking import heads_largest_first
    c = model.config
    out = {"commit": commit(), "cpu": cpu(), "load_average_before": os.getloadavg(), "by_T": {}}
    for T in args.T:
        ids = model.ids(ARTICLE if T == 10 else text_of(T))
        run, first = effects.gradient_run(model, ids, explain.recording(len(ids)))
        token = int(run.last_logits.argmax())
        lp_t = effects.log_probs(run.last_logits)[token]
        direct = attribution.direct_contributions(run, token).heads
        heads = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
        start = time.perf_counter()
        resid = {l: run[f"layers.{l}.resid_pre"] for l in range(c.n_layers)}
        exact = (effects.head_log_probs(model, ids, token, heads, resid) - lp_t).view(c.n_layers, c.n_heads).float()
        row = out["by_T"][str(len(ids))] = {"exact_s": round(time.perf_counter() - start, 1),
                                            "top5": [[l, h, round(float(exact[l, h]), 4)] for l, h in heads_largest_first(exact)[:5]],
                                            "first_order": judge(first, exact, direct)}
        for n in args.points:
            start = time.perf_counter()
            est = path_mean(model, ids, token, n)
            row[f"path_mean_{n}"] = {**judge(est, exact, direct), "seconds": round(time.perf_counter() - start, 2)}
        row["grids"] = {"exact": exact.tolist(), "first_order": first.tolist(), "direct": direct.tolist()}
        print(json.dumps({k: v for k, v in row.items() if k != "grids"}), file=sys.stderr, flush=True)
    out["load_average_after"] = os.getloadavg()
    if args.out is not None:
        save(out, args.out, "estimators")
    else:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
