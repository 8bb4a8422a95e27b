"""A whole start, for timing from process start to the first answer: import, load, one forward pass.

    python bench/start.py PROGRAM MODEL_PATH IDS

PROGRAM is "ours", "transformers" or "llama.cpp"; IDS the token ids, comma-separated (the same ids
for every program: transformers has no tokenizer here). The caller times the process from outside;
this prints one JSON line with the phases it saw from inside: {"import_s", "load_s", "forward_s", "top1"}.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

def main() -> None:
    program, path, ids = sys.argv[1], Path(sys.argv[2]), [int(i) for i in sys.argv[3].split(",")]
    t0 = time.perf_counter()
    import peers

    peers.import_program(program)
    t1 = time.perf_counter()
    mode = {"ours": "none", "transformers": "sdpa", "llama.cpp": "prefill"}[program]
    peer = peers.make(program, mode, path, n_ctx=512)
    t2 = time.perf_counter()
    top1 = peer.prefill(ids)
    t3 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "forward_s": t3 - t2, "top1": top1}))


if __name__ == "__main__":
    main()
