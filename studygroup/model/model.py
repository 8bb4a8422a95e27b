"""A Llama-family model: the forward pass as one top-to-bottom story, recording what is asked.

Other families (Gemma 3, Qwen 2 and 3) differ as data (`studygroup.gguf.architectures`): a norm whose weight the
family lacks is not applied, the MLP's gate is the family's, local layers see a window of members.

Row-vector convention, as in the paper: a token's embedding is a row, ``Q = E·W_Q`` with
W_Q (d_model, n_heads·d_head). Shapes: B texts (1 unless silencing members in a batch),
T tokens, H = n_heads query heads, H_kv = n_kv_heads key/value heads, d = d_head.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch

from studygroup.formulas import attention
from studygroup.model import estimate, heap, model_names, threads
from studygroup.formulas import rope
from studygroup.formulas import shared_past
from studygroup.model.linear import onednn_takes, project
from studygroup.gguf.config import Config
from studygroup.model.arguments import token_ids, whole_number
from studygroup.errors import InputError, ModelFileError
from studygroup.progress import layer_advance, say
from studygroup.model.ablation import ZERO
from studygroup.model.interventions import Interventions, PassPlan, each_member_silenced, packed_members_silenced
from studygroup.model.record import Keeper, resolve
from studygroup.model.fusing import fuse, join_kept
from studygroup.model.packed import Weights
from studygroup.model.norm import rms_norm  # noqa: F401 (studygroup.model.model.rms_norm, as callers import it)
from studygroup.model.run import Run
from studygroup.gguf.model_path import default_model_path, resolve_model_path
from studygroup.gguf.tokenizer import Tokenizer


def norm_scale(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as a scale per element: weight / sqrt(mean(x²) + eps), so that
    rms_norm(x) = x · norm_scale(x). (…, d_model) -> (…, d_model), float32.

    Held at its value in a run, it makes a norm linear: a sum of writes normed is the sum of
    each write times this scale (how a head's write passes Gemma's norm after attention).

    >>> x, g = torch.tensor([[3.0, 4.0]]), torch.tensor([1.0, 2.0])
    >>> torch.allclose(x * norm_scale(x, g, 1e-6), rms_norm(x, g, 1e-6))
    True
    """
    x32 = x.float()
    return torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def layer_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, bias: torch.Tensor | None = None) -> torch.Tensor:
    """LayerNorm: (x - mean(x)) / sqrt(var(x) + eps) · weight + bias, in float32. (…, d_model) -> (…, d_model)"""
    b = None if bias is None else bias.float()
    return torch.nn.functional.layer_norm(x.float(), x.shape[-1:], weight.float(), b, eps).to(x.dtype)


#: The norm before attention, the MLP and the unembedding, by `Architecture.norm`.
NORMS = {"rms": lambda x, weight, eps, bias: rms_norm(x, weight, eps), "layer": layer_norm}

#: The MLP gate's nonlinearity by `Architecture.gate`: (gate, in place?) -> tensor.
GATES = {
    "silu": lambda gate, inplace: torch.nn.functional.silu(gate, inplace=inplace),  # SwiGLU
    "gelu_tanh": lambda gate, inplace: torch.nn.functional.gelu(gate, approximate="tanh"),  # GeGLU
}


class Model:
    """Weights, config and tokenizer of one GGUF file; `run` is the entry point.

    >>> import studygroup
    >>> model = studygroup.load()
    >>> run = model.run("I have a lot")
    >>> model.tokenizer.decode([int(run.logits[-1].argmax())])
    ' of'
    """

    def __init__(self, config: Config, weights: dict[str, torch.Tensor], tokenizer: Tokenizer,
                 path: Path | None = None, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32):
        self.config, self.tokenizer, self.path = config, tokenizer, path
        self.device, self.dtype = torch.device(device), dtype
        self.w = _weights(weights, config, self.device, dtype, path)
        self._rope_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self.embed_scale = math.sqrt(config.d_model) if config.arch.embed_scale else None
        self.gate = GATES[config.arch.gate]
        self.norm_kind = NORMS[config.arch.norm]
        self.rope = config.arch.position == "rope"  # else a learned position embedding, added to the first E

    def __repr__(self) -> str:
        c = self.config
        file = f", file {_file_name(self.path)}"
        return (f"<Model {c.label} ({c.architecture}): {c.n_layers} layers × {c.n_heads} heads "
                f"({c.n_kv_heads} kv heads), d_model {c.d_model}, d_head {c.d_head}, vocab {c.vocab_size}, "
                f"context {c.context_length}, {str(self.dtype).removeprefix('torch.')} on {self.device}{file}>")

    # ---- input -------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text`, as llama.cpp gives them. Raises InputError for empty text, and for
        text that is not Unicode characters (a lone surrogate: bytes that were not UTF-8)."""
        if not isinstance(text, str):
            raise InputError(f"the text must be a string, not {type(text).__name__}")
        if text == "":
            raise InputError("the text is empty: give at least one character")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InputError(f"the text holds {text[e.start]!a} at character {e.start}, a lone surrogate "
                             "(bytes that were not UTF-8?): give UTF-8 text") from None
        return self.tokenizer.encode(text)

    def ids(self, text_or_ids) -> list[int]:
        """Validated token ids from text or ids (non-empty, in the vocabulary, within the context)."""
        if isinstance(text_or_ids, str | bytes | bytearray):
            ids = self.tokenize(text_or_ids)
        else:
            ids = token_ids(text_or_ids)
        c = self.config
        if not ids:
            raise InputError("no tokens: give a non-empty text")
        if len(ids) > c.context_length:
            raise InputError(f"the text is {len(ids)} tokens long: the model's context holds {c.context_length}")
        bad = [i for i in ids if not 0 <= i < c.vocab_size]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary (0-{c.vocab_size - 1})")
        return ids

    def chat(self, text: str, system: str | None = None) -> list[int]:
        """Token ids of `text` as the user's turn of a chat in the model's own template (after
        `system`'s turn when given), ending with the assistant's turn opened; the template's markup
        as control tokens, the texts as plain text. InputError if the file has no template."""
        from studygroup.gguf.chat_template import chat_ids, messages

        for t in (text, system):
            if t is not None:
                self.tokenize(t)  # checked as any text is: a string, not empty, bytes the vocabulary spells
        try:
            ids = chat_ids(self.tokenizer, messages(text, system))
        except ModelFileError as e:  # the template is the file's: name it
            raise ModelFileError(f"{self.path or _file_name(None)}: {e}") from None
        return self.ids(ids)

    # ---- the story ---------------------------------------------------------------------------
    @heap.then_return_freed_memory(lambda self, ids, plan: plan.batch * ids.numel() * self.config.d_model * self.dtype.itemsize)
    def forward(self, ids: torch.Tensor, plan: PassPlan) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Embedding, then per layer attention and MLP with residuals; final norm; unembedding.

        ids: (T,) long. Returns logits (B, T or 1, vocab) and the recorded steps {name: tensor}.
        """
        with self.w.pass_():  # matrices kept as blocks: a layer's in float32 at a time
            return self._forward(ids, plan)

    def _forward(self, ids: torch.Tensor, plan: PassPlan) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        threads.tell_once_if_spinning(self.device.type)
        P = next(iter(plan.past.values()))[0].shape[-2] if plan.past else 0
        c, w, keep, buffers = self.config, self.w, Keeper(plan.record, plan.replace, P), _Buffers()
        first, x = plan.start or (0, self._embed(ids).unsqueeze(0))  # (1 or B, T, d_model)
        x = x.expand(plan.batch, -1, -1)  # (B, T, d_model)
        if plan.start is None:  # else x is the residual stream entering layer `first`
            x = keep("embed", x)
        if plan.start is None and "pos_embed" in w:  # E = token embedding + position embedding
            positions = torch.arange(P, P + len(ids), device=self.device) if plan.positions is None else plan.positions
            pos = w["pos_embed"][positions.to(self.device)]  # (T, d_model)
            x = x + keep("pos_embed", pos.expand(plan.batch, -1, -1))
        angles = {r: self._angles(len(ids), P, r) if plan.positions is None else self._angles_at(plan.positions, r)
                  for r in {c.rope_of(l) for l in range(c.n_layers)}}  # {(θ, scale): (cos, sin)}, one per RoPE
        asked = slice(-1, None) if plan.asked is None else plan.asked  # the rows that predict
        shortcut = False
        trim = self.device.type == "cpu" and heap.trims_each_layer(x.numel() * x.element_size())  # a long pass
        end = c.n_layers if plan.stop_after is None else plan.stop_after + 1
        on_layer = plan.on_layer or layer_advance(end - first, _pass_label(first, end, c.n_layers))
        for l in range(first, end):
            keep.layer = l
            w.enter_layer(l)
            if l in plan.joining:
                x = torch.cat([x, plan.joining[l].to(x.dtype)])  # (B + B_l, T, d_model)
            # In the last layer only the asked questions predict: unless more is kept, the other
            # rows give their keys and values and nothing else.
            shortcut = l == c.n_layers - 1 and not plan.all_logits and keep.last_row_suffices() and not keep.replaces_from(l)
            layer = partial(self._layer, l, angles=angles, plan=plan, keep=keep, rows=asked if shortcut else None,
                            buffers=buffers)
            x = w.checkpointed(l, layer, x, partial(keep.quiet, l))  # (B, T or R, d_model)
            if trim:  # the blocks this layer freed, back to the system (see studygroup.model.heap)
                heap.return_freed_memory()
            if on_layer is not None:
                on_layer()
        keep.layer = None
        if plan.stop_after is not None:
            return torch.empty(0), keep.steps
        x = keep("resid_final", x)
        x = x if plan.all_logits or shortcut else x[:, asked]  # (B, T or R, d_model): only asked rows predict
        final = keep("final", self._norm(x, "final_norm"))
        return w.unembed(final), keep.steps  # (B, T or R, vocab)

    def _layer(self, l: int, x: torch.Tensor, angles, plan: PassPlan, keep, rows, buffers: "_Buffers") -> torch.Tensor:
        """Layer l: attention, then the MLP, each added to the residual stream; rows: the questions
        that go on past attention (None: all). x (B, T, d_model) -> (B, T or R, d_model)"""
        keep.layer = l
        x = keep("resid_pre", x)
        E = keep("E", self._norm(x, f"layers.{l}.attn_norm"))  # (B, T, d_model)
        cos, sin = angles[self.config.rope_of(l)]
        attn_out = self._attention(l, E, cos, sin, plan, keep, rows)  # (B, T or R, d_model)
        x = keep("resid_mid", (x if rows is None else x[:, rows]) + attn_out)
        mlp_out = keep("mlp_out", self._mlp(l, self._norm(x, f"layers.{l}.mlp_norm"), buffers))  # (B, T or R, d_model)
        return keep("resid_post", x + mlp_out)

    def final_logits(self, resid_final: torch.Tensor) -> torch.Tensor:
        """Logits from the last layer's residual stream: the family's final norm (RMSNorm, or GPT-2's
        LayerNorm with its bias), then the unembedding, in the model's dtype (a recorded stream is
        float32: a bfloat16 model's numbers, exactly). (…, d_model) -> (…, vocab)

        Outside a pass: matrices kept as blocks let their layers' float32 buffers go first
        (`packed.Weights.let_layers_go`), so that the logits of many rows take their place."""
        self.w.let_layers_go()
        with self.w.pass_():
            return self.w.unembed(self._norm(resid_final.to(self.dtype), "final_norm"))

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """The family's norm (RMSNorm, or LayerNorm with its bias) with weight `name`. (…, d_model) -> same"""
        return self.norm_kind(x, self.w[name], self.config.rms_eps, self.w.get(name + "_bias"))

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings, times √d_model where the family scales them (Gemma). (T,) -> (T, d_model)"""
        x = self.w.rows("embed", ids)  # (T, d_model)
        return x if self.embed_scale is None else x * torch.tensor(self.embed_scale, dtype=x.dtype)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The residual stream entering layer 0 of B texts of T tokens each, at positions 0 … T − 1:
        the token embeddings plus, where the family learns one, the position embedding (GPT-2).
        What a pass started at layer 0 takes (`PassPlan.start`). ids (B, T) -> (B, T, d_model)

        >>> tuple(model.embed(torch.tensor([[1, 2, 3], [4, 5, 6]])).shape)
        (2, 3, 576)
        """
        B, T = ids.shape
        x = self._embed(ids.reshape(-1).to(self.device)).view(B, T, -1)  # (B, T, d_model)
        return x if "pos_embed" not in self.w else x + self.w["pos_embed"][:T]

    def _attention(self, l: int, E, cos, sin, plan: PassPlan, keep, rows=None) -> torch.Tensor:
        """Q, K, V; per-head q/k norm where the family has it; RoPE; grouped-query attention; each
        head's write through W_O (and through the norm after attention, its scale held, where the
        family has one).

        E (B, T, d_model) -> (B, R, d_model): R = T questions, or only those of `rows` (an index:
        the last member's question alone, say); every member still gives its key and value."""
        c, w = self.config, self.w
        B, T, _ = E.shape
        H, H_kv, d = c.n_heads, c.n_kv_heads, c.d_head
        W_QKV = w[f"layers.{l}.W_QKV"]  # (d_model, (H + 2·H_kv)·d)
        b_QKV = w.get(f"layers.{l}.b_QKV")  # ((H + 2·H_kv)·d,) where the family has biases (Qwen 2), else None
        if rows is not None:
            q, kv = project(E[:, rows], W_QKV[:, :H * d]), project(E, W_QKV[:, H * d:])  # (B, R, H·d), (B, T, 2·H_kv·d)
            if b_QKV is not None:
                q, kv = q + b_QKV[:H * d], kv + b_QKV[H * d:]
            k, v = kv.split(H_kv * d, -1)
        else:
            qkv = project(E, W_QKV)  # (B, T, (H + 2·H_kv)·d)
            q, k, v = (qkv if b_QKV is None else qkv + b_QKV).split([H * d, H_kv * d, H_kv * d], -1)  # (B, T, H·d | H_kv·d)
        q, k, v = (t.view(B, t.shape[1], -1, d).transpose(1, 2) for t in (q, k, v))
        q, k, v = keep("q_pre_rope", q), keep("k_pre_rope", k), keep("v", v)  # (B, H, R, d), (B, H_kv, T, d)
        if f"layers.{l}.q_norm" in w:  # per-head RMSNorm of q and k (Gemma 3, Qwen 3), over d
            q, k = rms_norm(q, w[f"layers.{l}.q_norm"], c.rms_eps), rms_norm(k, w[f"layers.{l}.k_norm"], c.rms_eps)
            q, k = keep("q_normed", q), keep("k_normed", k)
        asking = slice(None) if rows is None else rows
        if self.rope:
            q, k = rope.apply(q, cos[asking], sin[asking]), rope.apply(k, cos, sin)
        q, k = keep("q", q), keep("k", k)
        z = self._over_shared_past(l, q, k, v, plan, keep)  # (B, H, 1, d), or None
        if z is None:
            if l in plan.past:  # earlier members' keys and values, unchanged: (1, H_kv, P, d) each
                k, v = (torch.cat([p.expand(B, -1, -1, -1), t], dim=2) for p, t in zip(plan.past[l], (k, v)))
            mask = plan.masks.get(l, "causal")  # (B, 1|H, T, P + T) or "causal"
            window = self._window(l, plan, T, k.shape[-2], asking)  # (R, P + T) or None
            if isinstance(mask, str) and (isinstance(asking, torch.Tensor) or window is not None):
                mask = attention.causal_mask(T, k.shape[-2], device=E.device)  # (T, P + T): "causal" aligns rows at the end
            mask = mask if isinstance(mask, str) else mask[..., asking, :]  # (B, 1|H, R, P + T)
            mask = mask if window is None else mask & window  # members outside the window masked
            z = self._attend(q, k, v, mask, keep)  # (B, H, R, d)
        if l in plan.gates:
            g = plan.gates[l]  # (B, H) for every row, or (B, H, T) per row
            z = z * (g[:, :, None, None] if g.dim() == 2 else g[..., asking, None]).to(z.dtype)  # silenced: writes nothing
        W_O = w[f"layers.{l}.W_O"]  # (H·d, d_model)
        attn_out = project(z.transpose(1, 2).reshape(B, q.shape[2], H * d), W_O)  # (B, R, d_model)
        if f"layers.{l}.b_O" in w:  # GPT-2: W_O's bias, written once, by no head
            attn_out = attn_out + w[f"layers.{l}.b_O"]
        scale = None
        if f"layers.{l}.post_attn_norm" in w:  # Gemma: the heads' sum is normed before the residual
            attn_out = keep("attn_pre_norm", attn_out)
            scale = norm_scale(attn_out, w[f"layers.{l}.post_attn_norm"], c.rms_eps)  # (B, R, d_model)
            attn_out = (attn_out.float() * scale).to(attn_out.dtype)
        if keep.replaces("write"):  # the replaced writes' difference from the heads' own enters attn_out
            write = self._writes(l, z, scale)  # (B, H, R, d_model)
            new = keep("write", write)
            attn_out = attn_out + (new - write).sum(1)
        elif keep.keeps("write"):  # for the rows kept only
            n = keep.record.rows_kept("write")
            keep("write", self._writes(l, z, scale, slice(None) if n is None else slice(-n, None)))
        return keep("attn_out", attn_out)

    def _writes(self, l: int, z: torch.Tensor, scale: torch.Tensor | None, rows=slice(None)) -> torch.Tensor:
        """Each head's write to the residual stream, output_h·W_O[h] (times the held scale of the norm
        after attention, where the family has one), for these rows. z (B, H, T, d) -> (B, H, R, d_model)"""
        write = torch.einsum("bhtd,hdm->bhtm", z[:, :, rows], self.W_O_heads(l))  # (B, H, R, d_model)
        return write if scale is None else write * scale[:, None, rows]

    def _window(self, l: int, plan: PassPlan, T: int, K: int, asking) -> torch.Tensor | None:
        """(R, K) bool: the keys inside each asked row's window, in a local layer whose window
        leaves some member out; None otherwise. A row at position p sees keys at p - W + 1 … p.

        Positions: keys 0 … P - 1 (the reused past) then the rows' own (P …, or plan.positions)."""
        W = self.config.window_of(l)
        if W is None:
            return None
        P = K - T
        if plan.positions is None:
            if K <= W:
                return None
            keys = torch.arange(K, device=self.device)  # (K,)
        else:
            keys = torch.cat([torch.arange(P, device=self.device), plan.positions.to(self.device)])  # (K,)
            if int(keys.max()) < W:
                return None
        rows = keys[P:][asking]  # (R,)
        return (rows[:, None] - keys[None, :]) < W  # (R, K)

    def window_mask(self, l: int, T: int, rows: range | None = None) -> torch.Tensor | None:
        """(T, T) bool: the keys inside each member's window in layer l (None: no member is left out);
        with rows, those questions' rows only (len(rows), T).

        >>> model.window_mask(0, 4) is None  # the default model has no local layers
        True
        """
        W = self.config.window_of(l)
        if W is None or T <= W:
            return None
        rows = range(T) if rows is None else rows
        i = torch.arange(rows.start, rows.stop, device=self.device)  # (R,) questions
        return (i[:, None] - torch.arange(T, device=self.device)[None, :]) < W  # (R, T)

    def write_scale(self, l: int, attn_pre_norm: torch.Tensor) -> torch.Tensor | None:
        """The held scale a head's write passes on its way to the residual stream: the norm after
        attention's weight / rms of the heads' sum (Gemma); None where the family has no such norm.
        attn_pre_norm (…, d_model) -> (…, d_model)."""
        g = self.w.get(f"layers.{l}.post_attn_norm")
        return None if g is None else norm_scale(attn_pre_norm, g, self.config.rms_eps)

    def _over_shared_past(self, l: int, q, k, v, plan: PassPlan, keep) -> torch.Tensor | None:
        """Copies of ONE new member over earlier members they share (`plan.past`), the mask the
        same in every head: `shared_past.attend`, without a copy of the past per copy. None
        where that is not the case (or the maps are recorded): the general path then runs."""
        mask = plan.masks.get(l)  # (B, 1, 1, P + 1) or None
        if (l not in plan.past or q.shape[2] != 1 or k.shape[2] != 1 or keep.keeps("scores") or keep.keeps("weights")
                or (mask is not None and (mask.dim() != 4 or mask.shape[1] != 1))
                or self._window(l, plan, 1, plan.past[l][0].shape[-2] + 1, slice(None)) is not None):
            return None
        visible = None if mask is None else mask[:, 0, -1].expand(q.shape[0], -1)  # (B, P + 1)
        return keep("output", shared_past.attend(q, k, v, *plan.past[l], visible))  # (B, H, 1, d)

    def _attend(self, q, k, v, mask, keep) -> torch.Tensor:
        """softmax(Q Kᵀ/√d) V through the foundation's functions; weights only when recorded."""
        if keep.replaces("scores") or keep.replaces("weights"):
            return self._attend_replaced(q, k, v, mask, keep)
        if not (keep.keeps("scores") or keep.keeps("weights")):
            return keep("output", attention.fused(q, k, v, mask=mask, validate=False))  # (B, H, T, d)
        if keep.record.rows == "last":  # the full output fast; the weights for the last question only
            z = keep.swap("output", attention.fused(q, k, v, mask=mask, validate=False))  # (B, H, T, d)
            q, rows_mask = q[:, :, -1:], mask if isinstance(mask, str) else mask[..., -1:, :]
            out, weights = attention.paper(q, k, v, mask=rows_mask, validate=False)  # (B, H, 1, d), (B, H, 1, T)
            out = z[:, :, -1:] if keep.replaces("output") else out
            S = attention.scores(q, k, validate=False) if keep.keeps("scores") else None  # (B, H, 1, T)
        else:  # every map: block by block into the stored dtype, no other T×T temporaries
            out, weights, S = attention.by_rows(q, k, v, mask, weights_dtype=keep.record.map_dtype,
                                                with_scores=keep.keeps("scores"), validate=False)
            z = out = keep.swap("output", out)  # (B, H, T, d)
        if S is not None:
            keep("scores", S, is_map=True)
        keep("weights", weights, is_map=True)
        keep.store("output", out)
        return z

    def _attend_replaced(self, q, k, v, mask, keep) -> torch.Tensor:
        """The attention of a layer whose scores or weights are replaced: the scores (replaced), their
        weights per row under the mask (replaced), then the weighted sum of the answers.
        q (B, H, T, d), k, v (B, H_kv, T, d) -> z (B, H, T, d)"""
        _, weights, S = attention.by_rows(q, k, None, mask, with_scores=True, validate=False)  # (B, H, T, T) each
        S = keep("scores", S, is_map=True)
        weights = attention.weights_of(S, mask) if keep.replaces("scores") else weights
        weights = keep("weights", weights, is_map=True)
        z = weights.to(v.dtype) @ attention.repeat_kv(v, q.shape[1] // v.shape[1])  # (B, H, T, d)
        return keep("output", z)

    def _mlp(self, l: int, x: torch.Tensor, buffers: "_Buffers") -> torch.Tensor:
        """SwiGLU: (silu(x·W_gate) ⊙ x·W_up)·W_down (GeGLU with tanh GELU for Gemma, and its norm
        after the MLP). (B, T, d_model) -> (B, T, d_model)

        Without autograd (which cannot differentiate through out= or in place), its two wide
        intermediates live in buffers every layer reuses (oneDNN's product, in a small pass, is
        a fresh tensor: see `studygroup.model.linear`)."""
        if not self.config.arch.gated:
            return self._plain_mlp(l, x)
        W_gate_up, W_down = self.w[f"layers.{l}.W_gate_up"], self.w[f"layers.{l}.W_down"]
        grad = torch.is_grad_enabled()
        shape = (*x.shape[:-1], W_gate_up.shape[1])  # (B, T, 2·d_mlp)
        reuse = not grad and not onednn_takes(x, W_gate_up)
        gate_up = project(x, W_gate_up, out=buffers.get("gate_up", shape, x) if reuse else None)
        gate, up = gate_up.chunk(2, dim=-1)  # (B, T, d_mlp) each
        h = torch.mul(self.gate(gate, not grad), up, out=None if grad else buffers.get("h", gate.shape, x))  # (B, T, d_mlp)
        out = project(h, W_down)  # (B, T, d_model)
        post = self.w.get(f"layers.{l}.post_mlp_norm")
        return out if post is None else rms_norm(out, post, self.config.rms_eps)

    def _plain_mlp(self, l: int, x: torch.Tensor) -> torch.Tensor:
        """GPT-2's MLP, no gate: gelu(x·W_up + b_up)·W_down + b_down. (B, T, d_model) -> (B, T, d_model)"""
        p = f"layers.{l}."
        h = self.gate(project(x, self.w[p + "W_up"]) + self.w[p + "b_up"], False)  # (B, T, d_mlp)
        return project(h, self.w[p + "W_down"]) + self.w[p + "b_down"]

    def rope_angles(self, layer: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (T, d_head) of `layer`'s RoPE at positions 0 … T - 1, as the pass turns q and k
        (the layer's base and linear scale: `Config.rope_of`)."""
        return self._angles(T, 0, self.config.rope_of(layer))

    def _angles_at(self, positions: torch.Tensor, rope_of: tuple[float, float] | None = None):
        """cos, sin (T, d_head) at each row's position: positions (T,) long."""
        cos, sin = self._angles(int(positions.max()) + 1, 0, rope_of)
        return cos[positions], sin[positions]

    def _angles(self, T: int, offset: int = 0, rope_of: tuple[float, float] | None = None):
        """cos, sin (T, d_head) for positions offset … offset + T - 1 under `rope_of` = (θ, linear
        scale), a layer's `Config.rope_of` (None: rope_base, rope_scale). Llama 3.1's frequency
        divisors (rope_freqs) apply at rope_base."""
        c = self.config
        base, scale = (c.rope_base, c.rope_scale) if rope_of is None else rope_of
        key = (T, offset, base, scale)
        if key not in self._rope_cache:
            with torch.inference_mode(False):  # plain tensors, so that a pass with autograd may reuse them
                cos, sin = rope.angles(T, c.d_head, base, device=self.device, offset=offset, scale=scale,
                                       freq_divisors=self.w.get("rope_freqs") if base == c.rope_base else None)
            # one (T, offset) at a time: long texts would pile up otherwise
            self._rope_cache = {k: v for k, v in self._rope_cache.items() if k[:2] == (T, offset)}
            self._rope_cache[key] = (cos, sin)
        return self._rope_cache[key]

    # ---- weights by head ----------------------------------------------------------------------
    def W_O_heads(self, l: int) -> torch.Tensor:
        """Layer l's output projection split by head: (n_heads, d_head, d_model), a view.
        Head h writes output_h · W_O[h] to the residual stream."""
        c = self.config
        return self.w[f"layers.{l}.W_O"].view(c.n_heads, c.d_head, -1)

    def W_O_head(self, l: int, h: int) -> torch.Tensor:
        """Head h's slice of layer l's output projection, W_O[h]: (d_head, d_model), a view."""
        return self.W_O_heads(l)[h]

    # ---- entry points ------------------------------------------------------------------------
    def run(self, text_or_ids, record="default", silence_members: Sequence[int] = (), member_heads=None,
            silence_heads: Sequence[tuple[int, int]] = (), logits: str = "last", on_layer=None, replace=(),
            interventions: Interventions | None = None):
        """Run the model on one text and keep what `record` asks for.

        record: "default" (everything up to 256 tokens, the last member's row past that), "all",
          "none", a list of step names (see `studygroup.model.record.LAYER_STEPS`), or a Record.
        silence_members: members whose keys are removed from the others' view, in `member_heads`
          ((layer, head) pairs; None: every head).
        silence_heads: (layer, head) pairs whose write to the residual stream is zeroed.
        logits: "last" (run.logits is (1, vocab)) or "all" ((T, vocab)).
        on_layer: called after each layer (for a progress bar).
        replace: values the pass takes in place of what it computes at its hook points, and goes on
          with: `Replacement`s (rows and heads chosen), or {full step name: value} for every row
          (`studygroup.model.interventions.Replacement`).
        interventions: all of these as one value (`Interventions.make`, checked against this text),
          with how the silenced are taken out (zero, mean or resample ablation), instead.

        >>> other = model.run("You have a lot", record=["resid_pre"])
        >>> patched = model.run("I have a lot", replace={"layers.20.resid_pre": other["resid_pre", 20]})
        >>> torch.allclose(patched.logits, other.logits, atol=1e-4)  # from layer 20 on, the other text (float32 rounding)
        True
        """
        ids = self.ids(text_or_ids)
        settings = (Interventions.make(self, len(ids), silence_members, member_heads, silence_heads, replace)
                    if interventions is None else interventions.checked(self, len(ids)))
        return Run.compute(self, ids, settings, resolve(record, len(ids), self.config.n_layers), logits, on_layer)

    def before_pass(self, text_or_ids, interventions: Interventions | None = None) -> Run:
        """A run of this text with these interventions whose pass is not made yet: no logits,
        nothing recorded. Its `head_vectors` make the part of the pass they need (up to one layer), no more."""
        ids = self.ids(text_or_ids)
        settings = (interventions or Interventions()).checked(self, len(ids)).taken_out(self, ids)
        return Run(self, ids, settings, resolve("none", len(ids)), torch.empty(0, self.config.vocab_size), {})

    def generate(self, text_or_ids, n: int, temperature: float = 0.0, top_k: int | None = None,
                 top_p: float = 1.0, seed: int | None = None, ignore_eos: bool = False, candidates: int = 5,
                 silence_members: Sequence[int] = (), silence_heads: Sequence[tuple[int, int]] = (),
                 on_word=None, chat: bool = False, system: str | None = None, interventions: Interventions | None = None):
        """Up to n words after the text, one pass of one new member each (a key/value cache).

        Greedy by default (temperature 0); otherwise sampled from softmax(logits / temperature)
        cut to `top_k` and `top_p`, with a private generator seeded by `seed` (same seed, same
        words). Stops after an end-of-generation token (its word's stop is "eos") unless
        ignore_eos. candidates: the most likely words kept per step. silence_members (prompt
        members) and silence_heads apply at every word (or `interventions`' members and heads, taken
        out by its ablation: zero; mean, over the prompt's members or the reference texts, fixed
        before the first word; resample, from the source followed by the same words:
        `studygroup.model.generation_ablation`). on_word(word) is called as each comes.
        chat: the text is the user's turn in the model's chat template (`chat`; `system` before it).
        Returns a `studygroup.model.generate.Generation`: `.ids`, `.words`, `.to_json()`.
        """
        from studygroup.model import generate, sampling

        how = sampling.Sampling(temperature, top_k, top_p, seed)
        if chat:
            text_or_ids = self.chat(text_or_ids, system)
        elif system is not None:
            raise InputError("a system text goes with chat=True (the model's chat template)")
        ablation = ZERO
        if interventions is not None:
            if interventions.member_heads is not None:
                raise InputError("generation silences members in every head: give member_heads=None")
            silence_members, silence_heads = interventions.silenced_members, sorted(interventions.silenced_heads)
            ablation = interventions.ablation
        return generate.generate(self, text_or_ids, n, how, ignore_eos, candidates, silence_members,
                                 silence_heads, on_word, ablation)

    @torch.inference_mode()
    def silenced_logits(self, text_or_ids, members: Sequence[int], heads=None, kv=None, on_layer=None,
                        packed: bool = False) -> torch.Tensor:
        """Last-position logits with each member silenced alone, in ONE batched pass.

        Returns (len(members), vocab) float32: row b silences members[b] in `heads` (None: all).
        kv: {layer: (k, v)}, each (H_kv, T, d) after RoPE, from a run of the same text without
          interventions. The members before the first silenced one never see it (the mask is
          causal): their keys and values are then reused, and only the later rows recomputed.
        packed: each copy computes only the rows from its own member on, the copies one after
          another in one sequence (`masks.packed_member_masks`; needs kv), instead of side by side
          from the first member on.
        on_layer: called after each layer (a progress bar's advance).
        """
        c, ids = self.config, self.ids(text_or_ids)
        for j in members:
            self.check_member(j, len(ids))
        if packed and kv is None:
            raise ValueError("packed copies reuse the clean run's keys and values: give kv")
        if not len(members):
            return torch.empty(0, self.config.vocab_size)  # nobody silenced: no copies
        P = (max(members) if packed else min(members)) if kv is not None else 0  # rows reused
        if P and (sorted(kv) != list(range(self.config.n_layers))
                  or any(t.shape[-2] != len(ids) for pair in kv.values() for t in pair)):
            raise ValueError(f"kv must hold the keys and values of every layer for these {len(ids)} members")
        past = {l: (k[None, :, :P].to(self.dtype), v[None, :, :P].to(self.dtype)) for l, (k, v) in kv.items()} if P else {}
        ids_t, plan = (packed_members_silenced(c, ids, members, heads, self.device) if packed
                       else each_member_silenced(c, ids, members, heads, P, self.device))
        plan.past, plan.on_layer = past, on_layer
        logits, _ = self.forward(ids_t, plan)  # (B, 1, vocab) side by side, (1, B, vocab) packed
        return (logits[0] if packed else logits[:, -1]).float()

    # ---- checks ------------------------------------------------------------------------------
    def check_head(self, layer: int, head: int) -> tuple[int, int]:
        """(layer, head) as ints, or InputError unless that head exists."""
        c = self.config
        layer, head = whole_number(layer, "a layer"), whole_number(head, "a head")
        if not 0 <= layer < c.n_layers:
            raise InputError(f"layer {layer} does not exist: the model has {c.n_layers} layers (0-{c.n_layers - 1})")
        if not 0 <= head < c.n_heads:
            raise InputError(f"head {head} does not exist: each layer has {c.n_heads} heads (0-{c.n_heads - 1})")
        return layer, head

    def check_member(self, j: int, T: int) -> int:
        """j as an int, or InputError unless 0 <= j < T."""
        j = whole_number(j, "a member")
        if not 0 <= j < T:
            raise InputError(f"member {j} does not exist: the text has {T} tokens (0-{T - 1})")
        return j


def _weights(weights: dict, c: Config, device: torch.device, dtype: torch.dtype, path: Path | None) -> Weights:
    """Our weights on `device` in `dtype`, fused (`fusing`); matrices kept as the file's blocks stay so
    on the CPU in float32, and are turned into float32 now otherwise, one at a time on its way to the
    device and dtype (the host never holds more than one matrix in float32)."""
    kept = {n: t for n, t in weights.items() if not isinstance(t, torch.Tensor)}  # {name: FileMatrix}
    exact = {"rope_freqs"}  # RoPE's frequency divisors stay float32 in the bfloat16 mode
    moved = lambda k, t: t.to(device=device, dtype=torch.float32 if k in exact else dtype)  # noqa: E731
    if device.type == "cuda":
        estimate.check_weights_fit_device(c, _numbers_of(weights) * dtype.itemsize, device, dtype)
    if kept and (device.type != "cpu" or dtype != torch.float32):
        as_float32 = lambda n, t: Weights({}, {n: [t]}, c)[n] if n in kept else t  # noqa: E731
        # the moved tensors are held by fuse's dict alone: it frees each part as it joins them
        return Weights(fuse({n: moved(n, as_float32(n, t)) for n, t in weights.items()}, c), {}, c, None)
    tensors = fuse({k: moved(k, t) for k, t in weights.items() if k not in kept}, c)
    return Weights(tensors, join_kept(kept, c), c, resolve_model_path(path) if kept else None)


def _numbers_of(weights: dict) -> int:
    """How many numbers the weights hold (a matrix kept as blocks: its n_out × n_in)."""
    return sum(t.numel() if isinstance(t, torch.Tensor) else t.n_out * t.n_in for t in weights.values())


def _pass_label(first: int, end: int, n_layers: int) -> str:
    """What a pass over layers first … end - 1 is called in a Watch's stage."""
    if first == 0 and end == n_layers:
        return "a pass, layer by layer"
    return f"a pass through layers {first}-{end - 1}, layer by layer"


def _file_name(path: Path | None) -> str:
    """The model file's name (None: the default model's)."""
    try:
        return (path or default_model_path()).name
    except ModelFileError:
        return "(the default model, not found now)"


class _Buffers:
    """Working tensors that every layer of one pass reuses: a fresh (T, d_mlp) tensor per layer
    is a fresh mapping, paid in page faults (372k per 2,048-token pass before, 5-10% of its time)."""

    def __init__(self):
        self._t: dict[str, torch.Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """An uninitialised tensor of this shape, like `like` (dtype, device), reused by name."""
        t = self._t.get(name)
        if t is None or t.shape != shape or t.dtype != like.dtype or t.device != like.device:
            t = self._t[name] = like.new_empty(shape)
        return t


def load(path: str | Path | None = None, device: str = "cpu", dtype: str | torch.dtype = torch.float32,
         cache: bool = True, require_native: bool = True, defer_cache_write: bool = False) -> Model:
    """Load a GGUF file (None: the default SmolLM2-135M-Instruct; a packaged name such as
    "gemma-3-270m" or "qwen2.5-coder-1.5b": its file, joined from its packages; "ollama:NAME[:TAG]"
    or a name `studygroup models` lists: see `studygroup.model.model_names`) as a Model.

    dtype: float32 (exact, the default) or bfloat16 (the fast mode: on a CPU only where it
      multiplies bfloat16 natively, AVX512-BF16 or AMX, unless require_native=False).
    defer_cache_write: a first load leaves writing the weights cache to
      `studygroup.model.weights_cache.write_deferred()` (the CLI prints its answer first).

    >>> model = load()
    >>> model.config.n_layers, model.config.n_heads, model.config.n_kv_heads
    (30, 9, 3)
    """
    from studygroup.model.weights_cache import load_tokenizer
    from studygroup.model.weights_cache import load_weights

    device, dtype = _device(device), _dtype(dtype)
    if dtype == torch.bfloat16 and device.type == "cpu" and require_native and not native_bfloat16():
        raise InputError("bfloat16 is not native on this CPU (no AVX512-BF16 or AMX): it would run slower "
                         "than float32; use --dtype float32")
    path = model_names.model_file(path)  # "gemma-3-270m", "ollama:gemma3:270m", a listed name -> its file
    config, weights = load_weights(path, cache=cache, defer_write=defer_cache_write)
    if config.note:  # e.g. a Gemma 3 4B file's vision encoder, left unread
        say(f"studygroup: {config.label}: {config.note}")
    heap.use_own_mappings_for_large_blocks()
    return Model(config, weights, load_tokenizer(path, cache=cache), path, device, dtype)


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX-BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    names = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    if isinstance(dtype, torch.dtype) and dtype in names.values():
        return dtype
    if dtype not in names:
        raise InputError(f"dtype {dtype!r} is not supported: use float32 or bfloat16")
    return names[dtype]


def _device(device: str) -> torch.device:
    try:
        d = torch.device(device)
    except RuntimeError:
        raise InputError(f"unknown device {device!r}: use cpu or cuda") from None
    if d.type not in ("cpu", "cuda"):
        raise InputError(f"device {device!r} is not supported: use cpu or cuda")
    if d.type == "cuda" and not torch.cuda.is_available():
        raise InputError("CUDA was asked for but no CUDA device is available: use --device cpu")
    return d
