"""Prefill on a CUDA GPU: studygroup next to transformers (sdpa) on the same random weights.

The default model's file (98 MB) cannot travel to a lent GPU machine, so this times a model of
exactly its shape (SmolLM2-135M: 30 layers, 9 heads / 3 kv heads, d_model 576, vocab 49,152)
with random weights, shared by both peers. Prints tokens per second at each T and their ratio,
peak GPU memory, and the largest logit difference between the peers (float32).

    python bench/gpu_prefill.py --T 512 2048 8192 --repeats 5
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from studygroup.gguf.config import Config
from studygroup.model.model import Model
from studygroup.model.record import Record

SMOLLM2 = Config(n_layers=30, n_heads=9, n_kv_heads=3, d_model=576, d_head=64, d_mlp=1536,
                 context_length=8192, rope_base=100000.0, rms_eps=1e-5, vocab_size=49152)


def random_weights(c: Config, seed: int = 0) -> dict[str, torch.Tensor]:
    """Weights in studygroup's paper layout (in, out), scaled like a trained model's."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g) / shape[0] ** 0.5  # noqa: E731
    w = {"embed": torch.randn(c.vocab_size, c.d_model, generator=g), "final_norm": torch.ones(c.d_model)}
    for l in range(c.n_layers):
        p = f"layers.{l}."
        w |= {p + "attn_norm": torch.ones(c.d_model), p + "mlp_norm": torch.ones(c.d_model),
              p + "W_Q": r(c.d_model, c.n_heads * c.d_head), p + "W_K": r(c.d_model, c.n_kv_heads * c.d_head),
              p + "W_V": r(c.d_model, c.n_kv_heads * c.d_head), p + "W_O": r(c.n_heads * c.d_head, c.d_model),
              p + "W_gate": r(c.d_model, c.d_mlp), p + "W_up": r(c.d_model, c.d_mlp), p + "W_down": r(c.d_mlp, c.d_model)}
    return w


def hf_model(c: Config, w: dict[str, torch.Tensor], dtype, device):
    """transformers' LlamaForCausalLM holding the same weights (their layout is (out, in))."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_mlp,
                      num_hidden_layers=c.n_layers, num_attention_heads=c.n_heads, num_key_value_heads=c.n_kv_heads,
                      head_dim=c.d_head, max_position_embeddings=c.context_length, rope_theta=c.rope_base,
                      rms_norm_eps=c.rms_eps, tie_word_embeddings=True, attn_implementation="sdpa")
    names = {"W_Q": "self_attn.q_proj", "W_K": "self_attn.k_proj", "W_V": "self_attn.v_proj",
             "W_O": "self_attn.o_proj", "W_gate": "mlp.gate_proj", "W_up": "mlp.up_proj", "W_down": "mlp.down_proj"}
    sd = {"model.embed_tokens.weight": w["embed"], "model.norm.weight": w["final_norm"]}
    for l in range(c.n_layers):
        sd[f"model.layers.{l}.input_layernorm.weight"] = w[f"layers.{l}.attn_norm"]
        sd[f"model.layers.{l}.post_attention_layernorm.weight"] = w[f"layers.{l}.mlp_norm"]
        for ours, theirs in names.items():
            sd[f"model.layers.{l}.{theirs}.weight"] = w[f"layers.{l}.{ours}"].T.contiguous()
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(sd, strict=False)
    return model.to(device=device, dtype=dtype).eval()


def timed(fn, repeats: int) -> tuple[float, float]:
    """Median seconds over `repeats` runs after one warm-up, and peak memory in GiB."""
    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), torch.cuda.max_memory_allocated() / 2**30


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, nargs="+", default=[512, 2048, 8192])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    c, w = SMOLLM2, random_weights(SMOLLM2)
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        ours = Model(c, dict(w), tokenizer=None, device="cuda", dtype=dtype)
        theirs = hf_model(c, w, dtype, "cuda")
        for T in args.T:
            ids = torch.randint(0, c.vocab_size, (T,), generator=torch.Generator().manual_seed(T)).tolist()
            ids_t = torch.tensor([ids], device="cuda")
            with torch.inference_mode():
                t_ours, m_ours = timed(lambda: ours.run(ids, record="none"), args.repeats)
                t_last, m_last = timed(lambda: ours.run(ids, record=Record(steps=("weights",), rows="last")), args.repeats)
                t_hf, m_hf = timed(lambda: theirs(ids_t, logits_to_keep=1), args.repeats)
                diff = (ours.run(ids, record="none").logits[-1].float() - theirs(ids_t, logits_to_keep=1).logits[0, -1].float()).abs().max().item()
            row = {"dtype": str(dtype).split(".")[-1], "T": T, "ours_tok_s": T / t_ours, "ours_last_row_tok_s": T / t_last,
                   "transformers_sdpa_tok_s": T / t_hf, "ratio": t_hf / t_ours, "last_row_overhead": t_last / t_ours - 1,
                   "ours_peak_gib": m_ours, "ours_last_row_peak_gib": m_last, "transformers_peak_gib": m_hf,
                   "max_logit_diff": diff}
            rows.append(row)
            print(json.dumps(row), flush=True)
        del ours, theirs
        torch.cuda.empty_cache()
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| dtype | T | ours tok/s | last-row tok/s | transformers sdpa tok/s | ours / transformers | peak GiB ours / theirs | max logit diff |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dtype']} | {r['T']} | {r['ours_tok_s']:,.0f} | {r['ours_last_row_tok_s']:,.0f} | {r['transformers_sdpa_tok_s']:,.0f} "
              f"| {r['ratio']:.2f}× | {r['ours_peak_gib']:.2f} / {r['transformers_peak_gib']:.2f} | {r['max_logit_diff']:.2e} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
