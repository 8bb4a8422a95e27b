"""A short run of bench/load_test.py on the tiny model: the server stays up, answers only 2xx, 4xx
and deliberate 503s, and the report has its figures. (The full run: 50 clients, 60 s.)"""
from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "load_test.py"


def test_load_test_smoke(tiny_model, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("load_test", BENCH)
    load_test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load_test)
    out = tmp_path / "load.json"
    argv = ["--model", str(tiny_model.path), "--clients", "12", "--duration", "4", "--json", str(out)]
    # in a thread of its own: its asyncio.run() needs a thread with no event loop running (the
    # browser tests' Playwright keeps one in the main thread for the whole session)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        code = pool.submit(load_test.main, argv).result()
    import json

    s = json.loads(out.read_text())
    assert code == 0, s
    assert s["requests"] > 0 and s["served_200"] > 0 and s["unexpected_errors"] == {}
    assert set(s["by_code"]) <= {"200", "503"}
    assert s["memory_mib"]["peak"] > 0 and s["latency_200_s"]["p50"] is not None
