"""Direct logit attribution: how much each part's write to the residual stream adds to one logit.

The residual stream at the last position is a sum of writes: the token's embedding, every
head's write (output_h · W_O[h]) and every MLP's write. The logit of word t reads it through the
final RMSNorm and the unembedding,

    logit_t = (x / rms(x)) ⊙ g · W_U[:, t],      rms(x) = sqrt(mean(x²) + ε),

so with the norm's scale rms(x) frozen at its value in this run the logit is linear in the
writes, and each write's share is  write · (g ⊙ W_U[:, t]) / rms(x).  The shares add up to the
logit exactly (up to float error). They are not the effect of removing a part: removing one
changes rms(x) and what every later layer computes (see `studygroup.study.effects` for that).

A family whose final norm is a LayerNorm (GPT-2) also subtracts the mean of x and adds a bias b:
with its scale σ(x) = sqrt(var(x) + ε) held, the centring is linear too (a write's mean is taken
out by reading it along the centred direction), and the parts are then the token embedding, the
position embedding, the heads, the MLPs and the biases no head writes (attention's output bias,
the final norm's b · W_U[:, t]).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

#: What a run must have recorded (the last row is enough) for `direct_contributions`.
NEEDED_STEPS = ("embed", "pos_embed", "write", "mlp_out", "resid_final")  # pos_embed: where the family has one


@dataclass(frozen=True)
class LogitParts:
    """One logit split into the writes that make it: shapes in the trailing comments."""

    logit: float  # the logit itself, as the model computed it
    embed: float  # the token embedding's share
    heads: torch.Tensor  # (n_layers, n_heads) each head's share
    mlps: torch.Tensor  # (n_layers,) each MLP's share
    position: float = 0.0  # the learned position embedding's share (GPT-2; 0 for RoPE families)
    biases: float = 0.0  # the biases no head or MLP writes: attention's output bias, the final norm's (GPT-2)

    @property
    def total(self) -> float:
        """embed + position + Σ heads + Σ MLPs + biases: equals `logit` up to float error."""
        return (self.embed + self.position + float(self.heads.double().sum()) + float(self.mlps.double().sum())
                + self.biases)


def gap(p: LogitParts, q: LogitParts) -> LogitParts:
    """The parts of logit(w) - logit(r), from the parts of each: exact, as both were split with the
    same frozen norm scale. Softmax ignores what every logit shares, so a probability follows these."""
    return LogitParts(p.logit - q.logit, p.embed - q.embed, p.heads - q.heads, p.mlps - q.mlps,
                      p.position - q.position, p.biases - q.biases)


def logit_direction(resid_final: torch.Tensor, final_norm: torch.Tensor, unembed_col: torch.Tensor,
                    eps: float, centred: bool = False) -> torch.Tensor:
    """g ⊙ W_U[:, t] / rms(x): the direction a write is read along, with the norm's scale frozen.
    centred (LayerNorm): (g ⊙ W_U[:, t] − its mean) / sqrt(var(x) + ε), so that a write's mean is
    taken out as the norm takes it out of x.

    resid_final (d_model,) the last position's residual stream; final_norm g (d_model,);
    unembed_col W_U[:, t] (d_model,) -> (d_model,).

    >>> logit_direction(torch.tensor([3.0, 4.0]), torch.ones(2), torch.tensor([1.0, 0.0]), 0.0)
    tensor([0.2828, 0.0000])
    >>> logit_direction(torch.tensor([3.0, 4.0]), torch.ones(2), torch.tensor([1.0, 0.0]), 0.0, centred=True)
    tensor([ 1., -1.])
    """
    x = resid_final.double()
    read = final_norm.double() * unembed_col.double()  # (d_model,)
    if centred:
        return ((read - read.mean()) / torch.sqrt(x.var(unbiased=False) + eps)).float()  # (d_model,)
    return (read / torch.sqrt(x.pow(2).mean() + eps)).float()  # (d_model,)


def direction_for(run, token: int) -> torch.Tensor:
    """The logit direction of `token` at the last position of `run`. -> (d_model,)"""
    model = run.model
    return logit_direction(run["resid_final"][-1], model.w["final_norm"], model.w.unembed_column(token),
                           model.config.rms_eps, centred=model.config.arch.norm == "layer")


def direct_contributions(run, token: int) -> LogitParts:
    """Split the last position's logit of `token` into embedding, head and MLP shares.

    `run` must have recorded NEEDED_STEPS (the default recording does; rows="last" is enough).

    >>> parts = direct_contributions(model.run("I have a lot"), 282)
    >>> abs(parts.total - parts.logit) < 1e-3
    True
    """
    missing = [s for s in NEEDED_STEPS if not any(k.endswith(s) for k in run.steps)
               and (s != "pos_embed" or "pos_embed" in run.model.w)]
    if missing:
        raise KeyError(f"direct contributions need the recorded steps {', '.join(missing)}")
    L = run.model.config.n_layers
    u = direction_for(run, token)  # (d_model,)
    writes = torch.stack([run["write", l][:, -1] for l in range(L)])  # (L, H, d_model)
    mlps = torch.stack([run["mlp_out", l][-1] for l in range(L)])  # (L, d_model)
    return LogitParts(logit=float(run.last_logits[token]), embed=float(run["embed"][-1] @ u),
                      heads=writes @ u, mlps=mlps @ u,  # (L, H), (L,)
                      position=float(run["pos_embed"][-1] @ u) if "pos_embed" in run.steps else 0.0,
                      biases=_biases(run.model, u, token))


def _biases(model, u: torch.Tensor, token: int) -> float:
    """The share of the biases no head or MLP writes: each layer's attention output bias, read
    along u, and the final norm's bias times W_U[:, t] (0 in a family without them)."""
    w, L = model.w, model.config.n_layers
    total = sum(float(w[f"layers.{l}.b_O"].double() @ u.double()) for l in range(L) if f"layers.{l}.b_O" in w)
    b = w.get("final_norm_bias")
    return total + (0.0 if b is None else float(b.double() @ w.unembed_column(token).double()))


def answers_through_head(v: torch.Tensor, W_O_h: torch.Tensor,
                         direction: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each member's answer as one head writes it: its size, and what it adds along a direction.

    The head writes Σ_j w_j (v_j · W_O[h]) for a question with weights w, so member j's part has
    size w_j · ‖v_j · W_O[h]‖ and adds w_j (v_j · W_O[h]) · direction to a logit. This returns the
    unweighted ‖v_j · W_O[h]‖ and (v_j · W_O[h]) · direction: multiply by the weights.
    v (T, d_head), W_O_h (d_head, d_model), direction (d_model,) -> sizes (T,), reads (T,) or None.

    >>> sizes, _ = answers_through_head(torch.eye(2), 2 * torch.eye(2))
    >>> sizes.tolist()
    [2.0, 2.0]
    """
    written = v @ W_O_h  # (T, d_head) @ (d_head, d_model) -> (T, d_model): each answer as written
    reads = None if direction is None else written @ direction  # (T,)
    return written.norm(dim=-1), reads  # (T,), (T,)


def member_shares(run, token: int) -> torch.Tensor:
    """Each member's direct share of the logit of `token`, through every head's last question.

    Σ over layers and heads of w_{T-1,j} (v_j · W_O[h]) · direction: the head shares of
    `direct_contributions`, split by member. Needs "weights" (last row) and "v". -> (T,)
    """
    c, u = run.model.config, direction_for(run, token)
    total = torch.zeros(run.T, device=run.model.device)
    for l in range(c.n_layers):
        W_O = run.model.W_O_heads(l).float()  # (H, d_head, d_model)
        read = W_O @ u  # (H, d_head): what one unit of each answer dimension adds to the logit
        v = run["v", l].repeat_interleave(c.group_size, dim=0)  # (H, T, d_head)
        per_answer = (v @ read[:, :, None])[..., 0]  # (H, T)
        total += (run["weights", l][:, -1].float() * per_answer).sum(0)  # (T,)
    return total.cpu()


def answer_sizes(model, layer: int, head: int, v: torch.Tensor) -> torch.Tensor:
    """‖v_j · W_O[h]‖ for every member j of one head: v (T, d_head) -> (T,) (answers_through_head
    with the model's W_O).

    >>> answer_sizes(model, 0, 0, torch.zeros(3, model.config.d_head)).tolist()
    [0.0, 0.0, 0.0]
    """
    c = model.config
    W_O_h = model.w[f"layers.{layer}.W_O"][head * c.d_head:(head + 1) * c.d_head].float()  # (d_head, d_model)
    sizes, _ = answers_through_head(v.float().to(W_O_h.device), W_O_h)
    return sizes.cpu()
