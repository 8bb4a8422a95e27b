"""SentencePiece vocabularies (GGUF tokenizer model "llama": Llama 2, TinyLlama, Mistral), as llama.cpp
tokenizes them.

A text fragment, its spaces written '▁' (and one '▁' put in front, when the file says so), is cut
into characters. Then, again and again, the two neighbours whose joined text is the vocabulary
entry with the highest score are joined (on a tie, the leftmost pair). No pre-tokenizer splits the
text first. A character that is no entry is spelled with byte tokens '<0xNN>', one per UTF-8 byte.
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence

from studygroup.errors import InputError, ModelFileError

SPACE = "\u2581"  # '▁', how SentencePiece writes a space inside a token


class SentencePiece:
    """The merge loop over one vocabulary with scores.

    >>> sp = SentencePiece(["<unk>", "▁", "a", "b", "▁a", "ab", "▁ab"], [0, -3, -4, -5, -1, -2, 0])
    >>> sp.encode("▁ab")  # ▁a (score -1) first, then ▁a + b makes ▁ab
    [6]
    >>> sp.encode("▁ba")  # b and a never join (no "ba"); ▁ stays alone
    [1, 3, 2]
    """

    def __init__(self, tokens: Sequence[str], scores: Sequence[float]):
        if len(scores) != len(tokens):
            raise ModelFileError(f"{len(tokens)} tokens but {len(scores)} token scores")
        self.ids: dict[str, int] = {}
        for i, t in enumerate(tokens):
            self.ids.setdefault(t, i)  # a repeated entry keeps its first id, as llama.cpp's lookup does
        self.scores = [float(s) for s in scores]

    def encode(self, text: str) -> list[int]:
        """One fragment (spaces already written '▁') -> token ids."""
        pieces = self._merge(list(text))
        return [i for piece in pieces for i in self._piece_ids(piece)]

    def _merge(self, symbols: list[str]) -> list[str]:
        """Join neighbours, the best-scored joined entry first, until no joined pair is an entry."""
        n = len(symbols)
        prev, next_ = list(range(-1, n - 1)), [*range(1, n), -1]
        queue: list[tuple[float, int, int, int]] = []  # (-score, left, right, joined length)

        def offer(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            joined = symbols[left] + symbols[right]
            if (i := self.ids.get(joined)) is not None:
                heapq.heappush(queue, (-self.scores[i], left, right, len(joined)))

        for i in range(1, n):
            offer(i - 1, i)
        while queue:
            _, left, right, size = heapq.heappop(queue)
            if not symbols[left] or not symbols[right] or len(symbols[left]) + len(symbols[right]) != size:
                continue  # stale: one side was joined to something else since
            symbols[left], symbols[right] = symbols[left] + symbols[right], ""
            next_[left] = next_[right]
            if next_[right] >= 0:
                prev[next_[right]] = left
            offer(prev[left], left)
            offer(left, next_[left])
        return [s for s in symbols if s]

    def _piece_ids(self, piece: str) -> list[int]:
        """An entry's id, or its UTF-8 bytes as byte tokens."""
        if (i := self.ids.get(piece)) is not None:
            return [i]
        return [self._byte_id(b, piece) for b in piece.encode("utf-8")]

    def _byte_id(self, b: int, piece: str) -> int:
        i = self.ids.get(f"<0x{b:02X}>")
        if i is None and b < 0x80:
            i = self.ids.get(chr(b))  # llama.cpp's fallback: the byte as a one-character entry
        if i is None:
            shown = piece.replace(SPACE, " ")
            raise InputError(f"the character {shown!r} (U+{ord(piece[0]):04X}) cannot be tokenized: this "
                             f"model's vocabulary has neither it nor a byte token <0x{b:02X}>; remove or replace it")
        return i


def escape(fragment: str, space_prefix: bool) -> str:
    """A text fragment as SentencePiece sees it: spaces as '▁', one in front when asked.

    >>> escape("I have a lot", True)
    '▁I▁have▁a▁lot'
    """
    return (" " + fragment if space_prefix else fragment).replace(" ", SPACE)


def byte_token_value(text: str) -> int | None:
    """'<0x0A>' -> 10; None for any other text.

    >>> byte_token_value("<0x0A>"), byte_token_value("<0x0A"), byte_token_value("a")
    (10, None, None)
    """
    if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        try:
            return int(text[3:5], 16)
        except ValueError:
            return None
    return None
