"""Ratios against the peers measured in the same run, the targets they are held to, and Markdown tables.

A ratio is ours / peer: below 1 we are faster (or smaller). Targets (issues 3, 4 and 6) are judged
only on a full run; `--quick` runs are for structure and correctness, never for speed.
"""
from __future__ import annotations

#: (name, numerator, denominator, quantity, target: the ratio must stay at or below it, the Ts it is judged at)
#: T "all": judged at every T. quantity "time" (median seconds) or "memory" (peak MiB).
PREFILL_RATIOS = [
    ("ours none / transformers sdpa", ("ours", "none"), ("transformers", "sdpa"), "time", 1.0, "all"),
    ("ours none / transformers sdpa, for 1.15× its speed", ("ours", "none"), ("transformers", "sdpa"), "time",
     round(1 / 1.15, 3), (512, 2048)),
    ("ours none / transformers eager", ("ours", "none"), ("transformers", "eager"), "time", None, None),
    ("ours none / llama.cpp", ("ours", "none"), ("llama.cpp", "prefill"), "time", None, None),
    ("ours default / ours none", ("ours", "default"), ("ours", "none"), "time", 1.15, "all"),
    ("ours last row / ours none", ("ours", "last_row"), ("ours", "none"), "time", 1.15, "all"),
    ("ours all / transformers eager+attentions", ("ours", "all"), ("transformers", "eager_attn"), "time", 0.5, 2048),
    ("ours maps16 / transformers eager+attentions", ("ours", "maps16"), ("transformers", "eager_attn"), "time", 0.5, 2048),
    ("ours maps on demand / transformers eager+attentions", ("ours", "maps_on_demand"), ("transformers", "eager_attn"), "time", 0.5, 2048),
    ("ours bf16 / ours none", ("ours", "bf16"), ("ours", "none"), "time", None, None),
    ("peak: ours none / transformers sdpa", ("ours", "none"), ("transformers", "sdpa"), "memory", None, None),
    ("peak: ours none / llama.cpp", ("ours", "none"), ("llama.cpp", "prefill"), "memory", None, None),
    ("peak: ours all / transformers eager+attentions", ("ours", "all"), ("transformers", "eager_attn"), "memory", 0.5, 2048),
    ("peak: ours maps16 / transformers eager+attentions", ("ours", "maps16"), ("transformers", "eager_attn"), "memory", 0.5, 2048),
    ("peak: ours maps on demand / transformers eager+attentions", ("ours", "maps_on_demand"), ("transformers", "eager_attn"), "memory", 0.5, 2048),
]
#: (name, numerator start entry, denominator start entry or None for an absolute figure in seconds, target)
STARTUP_RATIOS = [
    ("explain warm, seconds", "explain_warm", None, 2.0),
    ("explain warm, seconds (issue 6: the second run)", "explain_warm", None, 2.5),
    ("explain warm / plain forward warm", "explain_warm", "ours_warm", None),
    ("explain cold / transformers start", "explain_cold", "transformers", None),
    ("explain warm / transformers start", "explain_warm", "transformers", None),
    ("explain warm / llama.cpp start", "explain_warm", "llama.cpp", None),
    ("ours cold start / transformers start", "ours_cold", "transformers", None),
    ("ours warm start / transformers start", "ours_warm", "transformers", None),
    ("ours warm start / llama.cpp start", "ours_warm", "llama.cpp", None),
]


def ratios(results: dict) -> list[dict]:
    """Every ratio the run can form, with its target and verdict (None when not judged)."""
    judged = not results["meta"]["quick"]
    rows = {(r["program"], r["mode"], r["T"]): r for r in results["prefill"]}
    out = []
    for name, top, bottom, quantity, target, at in PREFILL_RATIOS:
        for T in results["meta"]["lengths"]:
            a, b = rows.get((*top, T)), rows.get((*bottom, T))
            key = "median_s" if quantity == "time" else "maxrss_mib"
            value = a[key] / b[key] if a and b and a.get(key) and b.get(key) and a["seconds"] and b["seconds"] else None
            applies = target is not None and (at == "all" or T in (at if isinstance(at, tuple) else (at,)))
            out.append({"name": name, "T": T, "value": value, "target": target if applies else None,
                        "meets": (value <= target) if applies and judged and value is not None else None})
    starts = {s["name"]: s for s in results.get("startup", [])}
    for name, top, bottom, target in STARTUP_RATIOS:
        a, b = starts.get(top, {}).get("median_s"), starts.get(bottom, {}).get("median_s") if bottom else 1.0
        value = a / b if a and b else None
        out.append({"name": name, "T": None, "value": value, "target": target,
                    "meets": (value <= target) if target is not None and judged and value is not None else None})
    return out


# ---- Markdown ---------------------------------------------------------------------------------
def markdown(results: dict) -> str:
    """All tables of one run, as Markdown."""
    parts = [machine(results["meta"]), prefill_tables(results), ratio_table(results), load_table(results)]
    if results.get("startup"):
        parts.append(startup_table(results))
    parts.append(targets(results))
    return "\n\n".join(p for p in parts if p)


def machine(m: dict) -> str:
    v = m["versions"]
    return (f"## Benchmark {m['date']}{' (quick: structure only, not a measurement)' if m['quick'] else ''}\n\n"
            f"{m['cpu']}, {m['cores']} cores, AVX-512 {'yes' if m['avx512'] else 'no'}, bf16 native "
            f"{'yes' if m['bf16_native'] else 'no'}, {m['mem_total_gib']} GiB; Python {m['python']}, torch {v['torch']}, "
            f"transformers {v['transformers']}, llama-cpp-python {m['llama_cpp'] or 'not installed'}; "
            f"studygroup {m['git_commit'][:10]}{' (studygroup/ modified)' if m['studygroup_dirty'] else ''}. "
            f"Model {m['model'].rsplit('/', 1)[-1]}. Load average at start {fmt_load(m['loadavg_start'])}, "
            f"end {fmt_load(m.get('loadavg_end'))}. Medians of {m['reps']} runs after {m['warmup']} warm-up "
            f"(fewer where a cell says so).")


def fmt_load(load) -> str:
    return "/".join(f"{x:.1f}" for x in load) if load else "?"


def prefill_tables(results: dict) -> str:
    lengths = results["meta"]["lengths"]
    rows, notes = {}, []
    for r in results["prefill"]:
        rows.setdefault((r["program"], r["mode"], r["label"]), {})[r["T"]] = r
    head = "| peer | " + " | ".join(f"T={T}" for T in lengths) + " |\n|---|" + "---:|" * len(lengths)
    time_lines, mem_lines, top_lines = [head], [head], [head]
    reference = {T: cells.get(T, {}).get("top1") for key, cells in rows.items() if key[:2] == ("ours", "none") for T in lengths}
    for (program, mode, label), cells in rows.items():
        t, m, top = [], [], []
        for T in lengths:
            r = cells.get(T)
            mark = note(r, notes)
            t.append(fmt_s(r["median_s"]) + (f" ({r['reps']} runs)" if r["seconds"] and r["reps"] != results["meta"]["reps"] else "") if r and r["seconds"] else mark)
            m.append(f"{r['maxrss_mib']:,.0f}" if r and r["seconds"] and r["maxrss_mib"] else mark)
            top.append((str(r["top1"]) + ("" if r["top1"] == reference.get(T) else " ≠")) if r and r["top1"] is not None else mark)
        time_lines.append(f"| {label} | " + " | ".join(t) + " |")
        mem_lines.append(f"| {label} | " + " | ".join(m) + " |")
        top_lines.append(f"| {label} | " + " | ".join(top) + " |")
    text = ("### Prefill time (median wall time of one forward pass over T tokens)\n\n" + "\n".join(time_lines)
            + "\n\n### Peak memory (MiB: the peer's own process, ru_maxrss after its runs at T)\n\n" + "\n".join(mem_lines)
            + "\n\n### Top-1 next token (≠: differs from studygroup record=\"none\")\n\n" + "\n".join(top_lines))
    if notes:
        text += "\n\n" + "\n".join(f"{i}. {n}" for i, n in enumerate(notes, 1))
    return text


def note(r: dict | None, notes: list[str]) -> str:
    """'–' with a numbered note for a cell that was skipped or failed."""
    if r is None:
        return "–"
    reason = r.get("skipped") or r.get("error")
    if not reason:
        return "–"
    if r["mode"] == "bf16" and r.get("error") and "not native" not in reason:
        reason = f"not native on this CPU: {reason}"
    text = f"{r['label']}, T={r['T']}: {reason}"
    if text not in notes:
        notes.append(text)
    return f"– ({notes.index(text) + 1})"


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds:.2f} s" if seconds >= 10 else f"{seconds * 1000:,.0f} ms"


def ratio_table(results: dict) -> str:
    lengths = results["meta"]["lengths"]
    by_name = {}
    for r in results["ratios"]:
        if r["T"] is not None:
            by_name.setdefault(r["name"], {})[r["T"]] = r
    lines = ["### Ratios, same run (ours / peer: below 1, ours is faster or smaller)", "",
             "| ratio | " + " | ".join(f"T={T}" for T in lengths) + " | target |", "|---|" + "---:|" * (len(lengths) + 1)]
    for name, cells in by_name.items():
        if all(c["value"] is None for c in cells.values()):
            continue
        values = [verdict(c) for c in (cells[T] for T in lengths)]
        judged_at = [T for T, c in cells.items() if c["target"] is not None]
        target = f"≤ {cells[judged_at[0]]['target']}" if judged_at else ""
        if judged_at and len(judged_at) < len(cells):
            target += " at T=" + ", ".join(map(str, judged_at))
        lines.append(f"| {name} | " + " | ".join(values) + f" | {target} |")
    return "\n".join(lines)


def verdict(r: dict) -> str:
    if r["value"] is None:
        return "–"
    mark = {True: " ✓", False: " ✗", None: ""}[r["meets"]]
    return f"{r['value']:.2f}{mark}"


def load_table(results: dict) -> str:
    lines = ["### Load inside the peer's process (seconds; studygroup's first load fills the cache)", "",
             "| peer | cache | load | peak MiB after load |", "|---|---|---:|---:|"]
    for r in results["load"]:
        cache = r["cache"] if r["program"] == "ours" else "–"
        load = f"{r['load_s']:.2f}" if r["load_s"] is not None else f"failed: {r['error']}"
        lines.append(f"| {r['label']} | {cache} | {load} | {r['maxrss_mib'] or 0:,.0f} |")
    return "\n".join(lines)


def startup_table(results: dict) -> str:
    n = results["meta"]["startup_reps"]
    lines = [f"### Start-up: process spawn to exit (median of {n}; phases as seen inside)", "",
             "| program | wall | import | load | forward | peak MiB |", "|---|---:|---:|---:|---:|---:|"]
    for s in results["startup"]:
        if s["error"]:
            lines.append(f"| {s['label']} | failed: {s['error']} | | | | |")
            continue
        p = s["phases"] or {}
        phase = lambda k: f"{p[k]:.2f} s" if k in p else ""  # noqa: E731
        lines.append(f"| {s['label']} | {s['median_s']:.2f} s | {phase('import_s')} | {phase('load_s')} | "
                     f"{phase('forward_s')} | {s['maxrss_mib']:,.0f} |")
    lines += ["", "| start-up ratio | value | target |", "|---|---:|---:|"]
    for r in results["ratios"]:
        if r["T"] is None and r["value"] is not None:
            lines.append(f"| {r['name']} | {verdict(r)} | {'≤ ' + str(r['target']) if r['target'] else ''} |")
    return "\n".join(lines)


def targets(results: dict) -> str:
    judged = [r for r in results["ratios"] if r["meets"] is not None]
    if not judged:
        return "" if results["meta"]["quick"] else "### Targets\n\nnone could be judged (peers missing)"
    lines = ["### Targets"]
    for r in judged:
        where = f" at T={r['T']}" if r["T"] is not None else ""
        lines.append(f"- {'meets' if r['meets'] else 'MISSES'}: {r['name']}{where} = {r['value']:.2f} (target ≤ {r['target']})")
    return "\n".join(lines)
