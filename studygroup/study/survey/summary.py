"""A survey's summary: per head and role, the mean score over the sequences, a 95% bootstrap
interval over sequences, n, and on how many sequences the head *is* a head of that role; and Gu
et al.'s sink rate.

- A head is an X head on a sequence when its X score there is at least THRESHOLD (0.5): for the
  weight roles, at least half of its weight, averaged over the questions scored, goes where X
  says (for broad: its rows' entropy is at least half of the uniform row's).
- The interval: B = 1,000 resamples of the sequences with replacement (numpy default_rng(seed)),
  each resample's mean over the sequences that score the role; the 2.5th and 97.5th percentiles.
- Sink rate (Gu et al., "When Attention Sink Emerges in Language Models"): on a sequence, the share
  of all heads whose mean weight on member 0 (over the questions scored, role `first`) exceeds
  SINK_RATE_WEIGHT (0.3); its mean and interval over the sequences, beside each head's `sink` score.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from studygroup.study.jsonable import JSONable
from studygroup.formats import brief
from studygroup.study.roles import ROLES, untold

THRESHOLD = 0.5
SINK_RATE_WEIGHT = 0.3
RESAMPLES = 1000
#: The summary's row for the sink rate, a share of all heads: its role; its layer and head are null.
SINK_RATE = "sink_rate"
SUMMARY_SCHEMA = pa.schema([("layer", pa.int16()), ("head", pa.int16()), ("role", pa.string()),
                            ("mean", pa.float64()), ("low", pa.float64()), ("high", pa.float64()),
                            ("n", pa.int32()), ("above", pa.int32())])


def bootstrap(x: np.ndarray, seed: int, resamples: int = RESAMPLES) -> tuple[np.ndarray, ...]:
    """Mean over sequences, 95% percentile-bootstrap interval and n of each column of x (S, K);
    NaN (not scored on that sequence) is left out. -> mean, low, high (K,) float64 and n (K,) int.

    >>> mean, low, high, n = bootstrap(np.array([[0.0], [1.0], [np.nan]]), seed=0)
    >>> float(mean[0]), int(n[0]), bool(0.0 <= low[0] <= high[0] <= 1.0)
    (0.5, 2, True)
    """
    S = x.shape[0]
    scored = ~np.isnan(x)  # (S, K)
    counts = np.random.default_rng(seed).multinomial(S, np.full(S, 1 / S), size=resamples).astype(np.float64)  # (B, S)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column no sequence scores: NaN, said by n = 0
        means = (counts @ np.where(scored, x, 0.0)) / (counts @ scored)  # (B, K)
        low, high = np.nanquantile(means, [0.025, 0.975], axis=0)  # (K,), (K,)
        mean = np.nanmean(x, axis=0)
    return mean, low, high, scored.sum(0)


def sink_rate(first: np.ndarray) -> np.ndarray:
    """Each sequence's share of heads whose weight on member 0 exceeds SINK_RATE_WEIGHT: (S, L, H) -> (S,).

    >>> sink_rate(np.array([[[0.9, 0.1]], [[0.5, 0.4]]])).tolist()
    [0.5, 1.0]
    """
    return (first > SINK_RATE_WEIGHT).mean(axis=(1, 2))


def summary_table(scores: np.ndarray, roles: tuple[str, ...], seed: int) -> pa.Table:
    """summary.parquet's rows from every sequence's scores (S, L, H, roles): one per (layer, head,
    role), layer by layer, then the sink rate's."""
    S, L, H, R = scores.shape
    mean, low, high, n = bootstrap(scores.reshape(S, -1), seed)
    above = (np.nan_to_num(scores, nan=-1.0) >= THRESHOLD).sum(0).reshape(-1)
    layer, head, role = (a.ravel() for a in np.meshgrid(np.arange(L), np.arange(H), np.arange(R), indexing="ij"))
    rate = [float(v[0]) for v in bootstrap(sink_rate(scores[..., roles.index("first")])[:, None], seed)]
    return pa.table({
        "layer": pa.array([*layer.tolist(), None], pa.int16()), "head": pa.array([*head.tolist(), None], pa.int16()),
        "role": pa.array([*(roles[r] for r in role), SINK_RATE]),
        "mean": pa.array([*mean, rate[0]]), "low": pa.array([*low, rate[1]]), "high": pa.array([*high, rate[2]]),
        "n": pa.array([*n.tolist(), int(rate[3])], pa.int32()), "above": pa.array([*above.tolist(), None], pa.int32()),
    }, schema=SUMMARY_SCHEMA)


@dataclass
class HeadSummary(JSONable):
    """One head's score in one role over a survey's sequences."""

    layer: int
    head: int
    role: str
    mean: float  # over the sequences that score the role (NaN where none does)
    low: float  # 95% bootstrap interval over sequences
    high: float
    n: int  # the sequences that score the role
    above: int  # the sequences on which the head is a head of this role (score >= threshold)


@dataclass
class Survey(JSONable):
    """A survey's summary (summary.parquet) and what it surveyed (survey.json). See docs/survey.md."""

    folder: str
    model: str  # the model file's name
    model_sha256: str
    corpus: str  # "probe", "pydoc" or "files"
    description: str
    sequences: int
    tokens: int
    threshold: float
    sink_rate: dict  # mean, low, high, n: Gu et al.'s, the share of heads with weight > 0.3 on member 0
    heads: list[HeadSummary] = field(repr=False)

    def __repr__(self) -> str:
        return brief(self, f"of {self.sequences} sequences of {self.tokens} tokens in {self.folder}: "
                           f"{self.story()[0] if self.story() else ''}", ".story(), .top(role), .heads")

    def top(self, role: str, k: int = 5) -> list[HeadSummary]:
        """The k heads with the highest mean in `role`, highest first."""
        scored = [h for h in self.heads if h.role == role and not math.isnan(h.mean)]
        return sorted(scored, key=lambda h: (-h.mean, h.layer, h.head))[:k]

    @property
    def what(self) -> str:
        """What the sequences are, in the story's words: "probe sequences", "pydoc sequences"."""
        return {"probe": "probe sequences", "pydoc": "pydoc sequences"}.get(self.corpus, "sequences of the files")

    def corpus_roles(self) -> list[HeadSummary]:
        """Each head's corpus role: of the roles of `roles`, the one with the highest mean over the
        sequences (the first of ROLES on a tie, as `roles.strongest`; none where no role is scored),
        head by head in layer order.

        >>> h = lambda role, mean: HeadSummary(0, 0, role, mean, mean, mean, 2, 2)
        >>> s = Survey("s", "m.gguf", "0" * 64, "probe", "", 2, 64, 0.5, {}, [h("local", 0.4), h("induction", 0.9)])
        >>> s.corpus_roles()[0].role
        'induction'
        """
        best: dict[tuple[int, int], HeadSummary] = {}
        for h in self.heads:
            if h.role in ROLES and not math.isnan(h.mean):
                now = best.get((h.layer, h.head))
                if now is None or (h.mean, -ROLES.index(h.role)) > (now.mean, -ROLES.index(now.role)):
                    best[h.layer, h.head] = h
        return [best[k] for k in sorted(best)]

    def said(self, h: HeadSummary) -> str:
        """One head's role over the survey in words, its numbers to 4 significant digits (a hover's text).

        >>> s = Survey("s", "m.gguf", "0" * 64, "probe", "", 200, 64, 0.5, {}, [])
        >>> s.said(HeadSummary(18, 6, "induction", 0.93125, 0.92, 0.9405, 200, 198))
        'head 18.6 over 200 probe sequences: induction 0.9313 [0.92, 0.9405] (mean, 95% interval); an induction head (score ≥ 0.5) on 198 of 200'
        """
        numbers = f"head {h.layer}.{h.head} over {h.n:,} {self.what}: {h.role} {h.mean:.4g} [{h.low:.4g}, {h.high:.4g}] (mean, 95% interval)"
        if h.role == "first":  # a weight, not a role a head plays
            return f"{numbers}; at least {self.threshold:g} of its weight on member 0 on {h.above:,} of {h.n:,}"
        return f"{numbers}; {_article(h.role)} {h.role} head (score ≥ {self.threshold:g}) on {h.above:,} of {h.n:,}"

    def marks(self) -> dict:
        """What the page marks the model view's heads with: each head's corpus role with its numbers
        and words (`said`), the story, and what was surveyed. JSON-able; see docs/web-api.md."""
        heads = [{**h.to_dict(), "said": self.said(h)} for h in self.corpus_roles()]
        return {"folder": self.folder, "model": self.model, "corpus": self.corpus, "description": self.description,
                "sequences": self.sequences, "tokens": self.tokens, "threshold": self.threshold,
                "story": self.story(), "heads": heads}

    def story(self) -> list[str]:
        """One sentence per role on its top head (the head of highest mean), then the sink rate.

        >>> h = lambda role, mean, above: HeadSummary(18, 6, role, mean, mean - 0.01, mean + 0.01, 200, above)
        >>> s = Survey("s", "m.gguf", "0" * 64, "probe", "", 200, 64, 0.5, dict(mean=0.1, low=0.1, high=0.1, n=200),
        ...            [h("induction", 0.93, 200), h("previous", 0.2, 3)])
        >>> s.story()[:2]
        ['head 18.6 is an induction head on 200 of 200 probe sequences (0.93 [0.92, 0.94])', 'no head is a previous head on most probe sequences: the closest, head 18.6, is on 3 of 200 (0.20 [0.19, 0.21])']
        """
        lines = [*self._too_short(), *(self._top_line(h) for role in ROLE_ORDER for h in self.top(role, 1))]
        r = self.sink_rate
        lines.append(f"sink rate (Gu et al.): {_interval(r['mean'], r['low'], r['high'])} of the heads give member 0 "
                     f"more than {SINK_RATE_WEIGHT} of their weight, over {r['n']:,} {self.what}")
        return lines

    def _too_short(self) -> list[str]:
        """The warning `roles` gives on a text too short to tell, for sequences of self.tokens ([] where none)."""
        reason = untold(self.tokens, 1)
        return [] if reason is None else [f"{reason}. Each of these {self.what} is {self.tokens} tokens, so the "
                                          "roles below do not say what the heads do: survey longer sequences (--tokens)."]

    def _top_line(self, h: HeadSummary) -> str:
        """The sentence on a role's top head: what it is on most sequences, or that no head is."""
        numbers = _interval(h.mean, h.low, h.high)
        if 2 * h.above >= h.n:
            return f"head {h.layer}.{h.head} is {_article(h.role)} {h.role} head on {h.above:,} of {h.n:,} {self.what} ({numbers})"
        return (f"no head is {_article(h.role)} {h.role} head on most {self.what}: the closest, head {h.layer}.{h.head}, "
                f"is on {h.above:,} of {h.n:,} ({numbers})")


ROLE_ORDER = ("induction", "previous", "duplicate", "sink", "local", "broad")


def _article(role: str) -> str:
    return "an" if role[0] in "aeiou" else "a"


def _interval(mean: float, low: float, high: float) -> str:
    return f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def survey_result(folder, plan, table: pa.Table) -> Survey:
    """The Survey of a folder from its plan and summary table."""
    rows = table.to_pylist()
    rate = next(r for r in rows if r["role"] == SINK_RATE)
    heads = [HeadSummary(**r) for r in rows if r["role"] != SINK_RATE]
    return Survey(str(folder), plan.model, plan.model_sha256, plan.corpus_name, plan.corpus, plan.sequences, plan.tokens, THRESHOLD,
                  {k: rate[k] for k in ("mean", "low", "high", "n")}, heads)
