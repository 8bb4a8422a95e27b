"""Every head's silence_effect_last_position two ways, in turns (A, B, A, B, ...), in one run:
A, every copy of the last row from layer 0 (`last_question.silenced_heads_logits`); B, each copy
joining the pass at its head's layer (`effects.last_position_head_log_probs`, what explain uses).
Prints wall and process CPU seconds, the load average, and the largest |A - B| in log p(t).

With --long T …, the long-text explain's last-position measures, in turns in one run: every head
(270) and every member, as explain measures them now, against the path that measured only the
heads chosen by |direct contribution| until 16 in a row were small (each copy from layer 0) and
the 24 members with the largest |direct share|. The CPU is named from lscpu.

    .venv/bin/python bench/last_position_heads.py --out bench/results/
    .venv/bin/python bench/last_position_heads.py --T 10 --explain   # and the whole explain, both ways
    .venv/bin/python bench/last_position_heads.py --T --long 600 2048 --reps 2
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explain_complete import ARTICLE, commit, cpu, save, timed  # noqa: E402
from long_explain import text_of  # noqa: E402


def whole_explain(model, reps: int) -> dict:
    """explain's own work on the article's sentence (every head and member), its last-position
    copies taken each way, in turns."""
    from studygroup.study import effects, explain, last_question
    joined = effects.last_position_head_log_probs
    ways = {"from_layer_0": lambda m, run, t, heads, bar=None: last_question.silenced_heads_logits(m, run, heads, t),
            "joined_at_layer": joined}
    runs = []
    try:
        for rep in range(reps):
            for name, way in ways.items():
                effects.last_position_head_log_probs = way
                m = timed(lambda: explain.analyse(model, ARTICLE) and None)
                m.pop("value")
                runs.append({"way": name, "rep": rep, **m})
                print(f"explain {runs[-1]}", file=sys.stderr, flush=True)
    finally:
        effects.last_position_head_log_probs = joined
    return {"runs": runs, "least_cpu_s": {n: min(r["cpu_s"] for r in runs if r["way"] == n) for n in ways}}


def long_paths(model, T: int, reps: int) -> dict:
    """Every head and member at the last position against the quick selection, on a text of T tokens."""
    from studygroup.model.record import Record
    from studygroup.study import attribution, effects, explain, last_question
    from studygroup.study.ranking import heads_largest_first, largest_first

    ids = model.ids(text_of(T))
    record = Record(steps=(*explain.STEPS, *last_question.STEPS, "resid_pre"), rows="last")
    run = model.run(ids, record=record)
    token = int(run.last_logits.argmax())
    lp_t = effects.log_probs(run.last_logits)[token]
    direct = attribution.direct_contributions(run, token).heads  # (L, H)
    shares = attribution.member_shares(run, token)  # (T,)

    def quick():
        measure = lambda heads: last_question.silenced_heads_logits(model, run, heads, token)  # noqa: E731
        heads, _ = explain.measured_heads(heads_largest_first(direct), None, len(ids), lp_t, measure)
        top = sorted(largest_first(shares)[:explain.MEMBERS_TOP])
        last_question.silenced_members_logits(model, run, [[j] for j in top], token)
        return len(heads), len(top)

    ways = {"quick_selection": quick,
            "every_head_and_member": lambda: (len(explain.every_head_last_position(run, token)),
                                              len(explain.every_member_last_question(run, token)))}
    row = {"T": len(ids), "runs": []}
    for rep in range(reps):
        for name, way in ways.items():
            m = timed(way)
            heads, members = m.pop("value")
            row["runs"].append({"way": name, "rep": rep, "heads": heads, "members": members, **m})
            print(f"T={len(ids)} {row['runs'][-1]}", file=sys.stderr, flush=True)
    row["least_wall_s"] = {n: min(r["wall_s"] for r in row["runs"] if r["way"] == n) for n in ways}
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, nargs="*", default=[10, 47, 300])
    ap.add_argument("--long", type=int, nargs="*", default=[], help="texts of these lengths: every head and member "
                    "at the last position against the quick selection")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--explain", action="store_true", help="also the whole explain of the article's sentence both ways")
    args = ap.parse_args()
    import studygroup
    model = studygroup.load()
    from studygroup.study import effects, explain, last_question
    c = model.config
    heads = [(l, h) for l in range(c.n_layers) for h in range(c.n_heads)]
    ways = {"from_layer_0": lambda run, t: last_question.silenced_heads_logits(model, run, heads, t),
            "joined_at_layer": lambda run, t: effects.last_position_head_log_probs(model, run, t, heads)}
    out = {"commit": commit(), "cpu": cpu(), "load_average_before": os.getloadavg(), "by_T": {}}
    for T in args.T:
        ids = model.ids(ARTICLE if T == 10 else text_of(T))
        run = model.run(ids, record=explain.recording(len(ids)))
        token = int(run.last_logits.argmax())
        row = out["by_T"][str(len(ids))] = {"runs": []}
        values = {}
        for rep in range(args.reps):
            for name, way in ways.items():
                m = timed(lambda: way(run, token))
                values[name] = m.pop("value")
                row["runs"].append({"way": name, "rep": rep, **m})
                print(f"T={len(ids)} {row['runs'][-1]}", file=sys.stderr, flush=True)
        row["max_abs_difference"] = float((values["from_layer_0"] - values["joined_at_layer"]).abs().max())
        least = {n: min(r["wall_s"] for r in row["runs"] if r["way"] == n) for n in ways}
        row["least_wall_s"], row["joined_over_from_layer_0"] = least, round(least["joined_at_layer"] / least["from_layer_0"], 2)
    if args.explain:
        out["explain_article"] = whole_explain(model, args.reps)
    out["long"] = [long_paths(model, T, args.reps) for T in args.long]
    for row in out["long"]:
        print(f"{out['cpu']['model_name']}, T={row['T']}: every head and member {row['least_wall_s']['every_head_and_member']} s "
              f"wall, the quick selection {row['least_wall_s']['quick_selection']} s", file=sys.stderr)
    out["load_average_after"] = os.getloadavg()
    text = json.dumps(out, indent=1)
    print(text)
    if args.out is not None:
        save(out, args.out, "last-position-heads")


if __name__ == "__main__":
    main()
