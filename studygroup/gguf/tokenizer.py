"""Text <-> token ids, built from the GGUF file's own vocabulary, the way llama.cpp tokenizes.

Two kinds of vocabulary (`tokenizer.ggml.model`): "llama", SentencePiece pieces with scores
(Llama 2, TinyLlama, Mistral; see tokenizer_spm), and "gpt2", byte-level BPE (SmolLM2, Llama 3):

Byte-level BPE ("gpt2" tokenizer model in GGUF terms): the text's UTF-8 bytes are first split into
pieces by the regexes of the file's pre-tokenizer (`tokenizer.ggml.pre`), each byte is spelled as
one printable character (GPT-2's byte alphabet: a space is 'Ġ', a newline 'Ċ'), and the merges are
applied within each piece. We build it with Hugging Face `tokenizers` from
`tokenizer.ggml.tokens` and `tokenizer.ggml.merges`.

Like llama.cpp by default, special-token text typed by a user (`<|im_start|>`) is tokenized as
plain text: control tokens are not matched in text. User-defined tokens are, as in llama.cpp. Which
entries are which is the file's `tokenizer.ggml.token_type` with llama.cpp's overrides by text
(token_types.py: `</s>`, `<|endoftext|>`, ... are control tokens in every family).
"""
from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers

from studygroup.errors import InputError, ModelFileError
from studygroup.gguf.metadata import lookup
from studygroup.gguf.sentencepiece import SPACE, SentencePiece, byte_token_value, escape
from studygroup.gguf.token_types import (NAMED_ENDS, TOKEN_BYTE, TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_UNKNOWN,
                                         TOKEN_USER_DEFINED, FILL_IN_THE_MIDDLE, llama_cpp_token_types)

FORMAT = "studygroup-tokenizer-7"  # what a cached tokenizer JSON holds; change it when that changes
PLAIN_TEXT_TYPES = (TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNKNOWN)  # stored as the text they stand for
MODELS = ("gpt2", "llama")  # tokenizer.ggml.model values studygroup reads
# llama.cpp's defaults for a SentencePiece vocabulary that does not name them.
SPM_DEFAULTS = {"bos_id": 1, "eos_id": 2, "add_bos": True, "add_space_prefix": True}
BPE_DEFAULT_EOS_ID = 11  # llama.cpp's end of sentence for a byte-level BPE file that names none

# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp), applied in order; each keeps both its
# matches and the text between them as pieces (tokenizers' "isolated" Split).
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3_REGEX = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
                r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
ONE_DIGIT_REGEX = r"\p{N}"  # SmolLM/StarCoder: every digit is its own piece
# Qwen 2's: Llama 3's with one digit a piece (llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN2).
QWEN2_REGEX = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
               r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizer:
    """One llama.cpp pre-tokenizer type: its regexes and flags."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a piece that is itself a token is taken whole (Llama 3)
    add_bos: bool = False  # default when the file has no tokenizer.ggml.add_bos_token


_GPT2 = PreTokenizer((GPT2_REGEX,))
_SMOLLM = PreTokenizer((ONE_DIGIT_REGEX, GPT2_REGEX))
_LLAMA3 = PreTokenizer((LLAMA3_REGEX,), ignore_merges=True, add_bos=True)
_QWEN2 = PreTokenizer((QWEN2_REGEX,))
_DEFAULT = PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", GPT2_REGEX, r"\p{N}+", r"[0-9][0-9][0-9]"))
# tokenizer.ggml.pre -> pre-tokenizer, as llama.cpp maps them.
PRE_TOKENIZERS = {
    "default": _DEFAULT,
    "gpt2": _GPT2, "gpt-2": _GPT2, "phi-2": _GPT2, "mpt": _GPT2, "olmo": _GPT2,
    "smollm": _SMOLLM, "starcoder": _SMOLLM, "refact": _SMOLLM, "codeshell": _SMOLLM,
    "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2,
    "llama-bpe": _LLAMA3, "llama3": _LLAMA3, "llama-v3": _LLAMA3, "dbrx": _LLAMA3, "smaug-bpe": _LLAMA3,
}
# Shown for each byte where it cannot be printed as itself.
VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


class Tokenizer:
    """The tokenizer of one GGUF file (byte-level BPE or SentencePiece); ids equal llama.cpp's.

    >>> tok = model.tokenizer  # model = studygroup.load(): the default model
    >>> tok.encode("I have a lot")
    [57, 457, 253, 2341]
    >>> [tok.readable(i) for i in tok.encode("I have a lot")]
    ['I', '␣have', '␣a', '␣lot']
    """

    def __init__(self, tokens: list[str], merges: list[str], token_types: list[int], pre: str,
                 bos_id: int | None, eos_id: int | None, add_bos: bool | None = None, *,
                 model: str = "gpt2", scores: list[float] | None = None, add_space_prefix: bool | None = None,
                 built: str | None = None, chat_template: str | None = None):
        _check_model(model)
        if model == "gpt2" and pre not in PRE_TOKENIZERS:
            raise ModelFileError(f"tokenizer.ggml.pre = {pre!r} is not a pre-tokenizer studygroup knows; "
                                 f"known: {', '.join(sorted(PRE_TOKENIZERS))}")
        if len(token_types) != len(tokens):
            raise ModelFileError(f"{len(tokens)} tokens but {len(token_types)} token types")
        self.model, self.tokens, self._merges, self.token_types, self.pre = model, tokens, merges, token_types, pre
        self.scores, self.bos_id, self.eos_id = scores, bos_id, eos_id
        self.chat_template = chat_template  # Jinja (tokenizer.chat_template), or None: see gguf.chat_template
        default_bos = SPM_DEFAULTS["add_bos"] if model == "llama" else PRE_TOKENIZERS[pre].add_bos
        self.add_bos = default_bos if add_bos is None else bool(add_bos)
        self.add_space_prefix = model == "llama" and (add_space_prefix is None or bool(add_space_prefix))
        if self.add_bos and bos_id is None:
            raise ModelFileError("the tokenizer should add a BOS token but the file names none")
        for name, id in (("bos", bos_id), ("eos", eos_id)):
            if id is not None and not 0 <= id < len(tokens):
                raise ModelFileError(f"tokenizer.ggml.{name}_token_id = {id} is outside the {len(tokens)} tokens")
        if model == "llama":
            self._spm = SentencePiece(tokens, scores if scores is not None else [])
        else:
            # `built`: the JSON of a tokenizer _build_hf made (the cache's; 4x faster than building it again)
            self._hf = (tokenizers.Tokenizer.from_str(built) if built
                        else _build_hf(tokens, merges, token_types, PRE_TOKENIZERS[pre]))

    @classmethod
    def from_gguf(cls, path: str | Path) -> Tokenizer:
        """Build from the tokenizer metadata of a GGUF file (no cache; see `studygroup.model.weights_cache.load_tokenizer`).

        >>> from studygroup.gguf.model_path import default_model_path
        >>> Tokenizer.from_gguf(default_model_path()).vocab_size
        49152
        """
        from studygroup.gguf.container import read_gguf

        file = read_gguf(path)
        try:
            return cls.from_fields(file.fields)
        except ModelFileError as e:
            raise ModelFileError(f"{file.path}: {e}") from e

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Tokenizer:
        """Build from GGUF metadata (gguf ReaderFields or plain values) under `tokenizer.ggml.`.

        >>> alphabet = list(byte_alphabet().values())
        >>> tok = Tokenizer.from_fields({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt2",
        ...     "tokenizer.ggml.tokens": alphabet + ["Ġa"], "tokenizer.ggml.merges": ["Ġ a"]})
        >>> tok.encode("a a")
        [97, 256]
        """
        model = lookup(fields, "tokenizer.ggml.model")
        if model == "llama":
            return cls._sentencepiece_from_fields(fields)
        _check_model(model)
        tokens = lookup(fields, "tokenizer.ggml.tokens", list, [], items=str)
        merges = lookup(fields, "tokenizer.ggml.merges", list, [], items=str)
        if not tokens or not merges:
            raise ModelFileError("the file lacks tokenizer.ggml.tokens or tokenizer.ggml.merges")
        _check_merges(merges, set(tokens))
        return cls(tokens, merges, _types(fields, tokens, BPE_DEFAULT_EOS_ID),
                   pre=lookup(fields, "tokenizer.ggml.pre", str) or "default",
                   bos_id=lookup(fields, "tokenizer.ggml.bos_token_id", int),
                   eos_id=lookup(fields, "tokenizer.ggml.eos_token_id", int),
                   add_bos=lookup(fields, "tokenizer.ggml.add_bos_token", bool),
                   chat_template=lookup(fields, "tokenizer.chat_template", str))

    @classmethod
    def _sentencepiece_from_fields(cls, fields: Mapping[str, Any]) -> Tokenizer:
        """A "llama" (SentencePiece) vocabulary: tokens with scores, llama.cpp's defaults where unnamed."""
        tokens = lookup(fields, "tokenizer.ggml.tokens", list, [], items=str)
        scores = lookup(fields, "tokenizer.ggml.scores", list, items=float)
        if not tokens or scores is None:
            raise ModelFileError("the file lacks tokenizer.ggml.tokens or tokenizer.ggml.scores")
        return cls(tokens, [], _types(fields, tokens, SPM_DEFAULTS["eos_id"]), pre="", model="llama",
                   scores=[float(x) for x in scores],
                   bos_id=lookup(fields, "tokenizer.ggml.bos_token_id", int, SPM_DEFAULTS["bos_id"]),
                   eos_id=lookup(fields, "tokenizer.ggml.eos_token_id", int, SPM_DEFAULTS["eos_id"]),
                   add_bos=lookup(fields, "tokenizer.ggml.add_bos_token", bool, SPM_DEFAULTS["add_bos"]),
                   add_space_prefix=lookup(fields, "tokenizer.ggml.add_space_prefix", bool,
                                           SPM_DEFAULTS["add_space_prefix"]),
                   chat_template=lookup(fields, "tokenizer.chat_template", str))

    def to_json(self) -> dict[str, Any]:
        """Everything needed to rebuild this tokenizer, as a JSON-able dict (used by the cache).

        >>> Tokenizer.from_json(model.tokenizer.to_json()).vocab_size
        49152
        """
        # A byte-level BPE's merges are in `built` already: not twice (reading them takes 30 ms)
        merges = [] if self.model == "gpt2" else self._merges
        return {"format": FORMAT, "model": self.model, "tokens": self.tokens, "merges": merges,
                "scores": self.scores, "token_types": self.token_types, "pre": self.pre, "bos_id": self.bos_id,
                "eos_id": self.eos_id, "add_bos": self.add_bos, "add_space_prefix": self.add_space_prefix,
                "built": _merges_as_strings(self._hf.to_str()) if self.model == "gpt2" else None,
                "chat_template": self.chat_template}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tokenizer:
        """Inverse of `to_json`; ValueError for anything else (the cache then rebuilds).

        >>> Tokenizer.from_json({"format": "other"})
        Traceback (most recent call last):
        ValueError: not a studygroup-tokenizer-7 tokenizer
        """
        if data.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} tokenizer")
        return cls(data["tokens"], data["merges"], data["token_types"], data["pre"], data["bos_id"], data["eos_id"],
                   data["add_bos"], model=data["model"], scores=data["scores"], add_space_prefix=data["add_space_prefix"],
                   built=data["built"], chat_template=data["chat_template"])

    @property
    def merges(self) -> list[str]:
        """The BPE merges, "a b" each ([] for SentencePiece). A cached tokenizer holds them only in
        the built one, read from there when asked."""
        if not self._merges and self.model == "gpt2":
            built = json.loads(self._hf.to_str())["model"]["merges"]  # "a b" or ["a", "b"] each
            self._merges = [m if isinstance(m, str) else " ".join(m) for m in built]
        return self._merges

    @property
    def vocab_size(self) -> int:
        """Number of token ids, 0 .. vocab_size - 1 (49152 for the default model)."""
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        """Text -> token ids (with BOS first when the file asks for it), as llama.cpp gives them.

        Text with a byte the vocabulary cannot spell raises InputError (llama.cpp drops it silently).

        >>> model.tokenizer.encode("3 + 4")
        [35, 1232, 216, 36]
        """
        if not isinstance(text, str):
            raise InputError(f"encode takes text (str), not {type(text).__name__}")
        if self.model == "llama":
            ids = self._encode_sentencepiece(text)
        else:
            self._check_writable(text)
            ids = self._hf.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if self.add_bos else ids

    def _encode_sentencepiece(self, text: str) -> list[int]:
        """As llama.cpp: user-defined tokens found first; every text fragment after the start or after
        such a token gets the space prefix (when the file asks for one)."""
        ids, after_token = [], True
        for fragment, token_id in self._fragments(text):
            if token_id is not None:
                ids.append(token_id)
            else:
                ids += self._spm.encode(escape(fragment, self.add_space_prefix and after_token))
            after_token = token_id is not None
        return ids

    def _fragments(self, text: str) -> list[tuple[str, int | None]]:
        """Text cut at user-defined tokens (longest first): [(fragment, None) or (token text, id)]."""
        if self._user_pattern is None:
            return [(text, None)] if text else []
        parts = self._user_pattern.split(text)  # odd positions: the tokens found
        return [(p, self._spm.ids[p] if k % 2 else None) for k, p in enumerate(parts) if p]

    @cached_property
    def _user_pattern(self):
        import re

        user = sorted({t for t, k in zip(self.tokens, self.token_types) if k == TOKEN_USER_DEFINED and t},
                      key=lambda t: (-len(t), t))
        return re.compile("(" + "|".join(map(re.escape, user)) + ")") if user else None

    def decode(self, ids: Iterable[int]) -> str:
        """Token ids -> text; bytes that do not form whole UTF-8 characters become '�'.

        >>> tok = model.tokenizer
        >>> tok.decode(tok.encode("Café 🙂"))
        'Café 🙂'
        """
        ids = list(ids)
        if self.add_bos and ids and ids[0] == self.bos_id:
            ids = ids[1:]  # the BOS that encode puts first
        pieces = [self.token_bytes(i) for i in ids]
        if self.add_space_prefix:
            pieces = self._without_space_prefixes(ids, pieces)
        return b"".join(pieces).decode("utf-8", errors="replace")

    def _without_space_prefixes(self, ids: list[int], pieces: list[bytes]) -> list[bytes]:
        """Drop the space that encode put in front of the text and after each user-defined token."""
        out, after_token = [], True
        for i, piece in zip(ids, pieces):
            user = self.token_types[i] == TOKEN_USER_DEFINED
            out.append(piece[1:] if after_token and not user and piece.startswith(b" ") else piece)
            after_token = user
        return out

    def token_bytes(self, id: int) -> bytes:
        """The raw bytes one token stands for (control and user-defined tokens: their text).

        >>> model.tokenizer.token_bytes(457)
        b' have'
        """
        id = self._check_id(id)
        if id not in self._bytes:  # built on first use, one token at a time (the whole table: 0.4 s)
            to_bytes = sentencepiece_token_bytes if self.model == "llama" else token_text_to_bytes
            self._bytes[id] = to_bytes(self.tokens[id], self.token_types[id])
        return self._bytes[id]

    def readable(self, id: int) -> str:
        """Display form of one token: '␣' for a space, '↵' newline, '⇥' tab, '␍' carriage return;
        bytes that are not whole UTF-8 characters or are unprintable control bytes as '<0xE2>'.

        >>> model.tokenizer.readable(457)
        '␣have'
        """
        return _readable(self.token_bytes(id))

    def _check_writable(self, text: str) -> None:
        """Refuse text with a byte the vocabulary cannot spell (SmolLM2 lacks 21 of the 256 byte
        tokens, e.g. 0xF1 and the control byte 0x04): llama.cpp silently drops such bytes."""
        if not self._missing_bytes or self._missing_bytes.isdisjoint(text.encode("utf-8")):
            return
        char = next(c for c in text if not self._missing_bytes.isdisjoint(c.encode("utf-8")))
        missing = ", ".join(f"0x{b:02X}" for b in char.encode("utf-8") if b in self._missing_bytes)
        raise InputError(f"the character {char!r} (U+{ord(char):04X}) cannot be tokenized: this model's "
                         f"vocabulary has no token for byte {missing}; remove or replace it")

    @cached_property
    def _missing_bytes(self) -> frozenset[int]:
        """Bytes with no single-byte token in the vocabulary."""
        known = set(self.tokens)
        return frozenset(b for b, c in byte_alphabet().items() if c not in known)

    def _check_id(self, id: Any) -> int:
        if isinstance(id, bool) or not isinstance(id, int):
            try:
                id = int(id)  # numpy and 0-d torch integers
            except (TypeError, ValueError):
                raise InputError(f"a token id must be an integer, not {id!r}") from None
        if not 0 <= id < self.vocab_size:
            raise InputError(f"token id {id} does not exist: the vocabulary has {self.vocab_size} "
                             f"tokens (0-{self.vocab_size - 1})")
        return id

    @cached_property
    def _bytes(self) -> dict[int, bytes]:
        """Raw bytes of the tokens asked for so far: {id: bytes}."""
        return {}


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map: printable bytes stand for themselves, the other
    68 bytes (space, control bytes, ...) are moved to U+0100 onwards (so a space is 'Ġ', U+0120).

    >>> byte_alphabet()[ord(" ")], byte_alphabet()[ord("a")]
    ('Ġ', 'a')
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in printable]
    table = {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(moved)}}
    return {b: table[b] for b in range(256)}  # in byte order


_CHAR_TO_BYTE = {c: b for b, c in byte_alphabet().items()}


def token_text_to_bytes(text: str, token_type: int) -> bytes:
    """A vocabulary entry -> the bytes it stands for.

    Normal tokens are spelled in GPT-2's byte alphabet ('Ġhave' -> b' have'); control and
    user-defined tokens are stored as their plain text (llama.cpp's convention).

    >>> token_text_to_bytes("Ġhave", TOKEN_NORMAL), token_text_to_bytes("<|im_end|>", TOKEN_CONTROL)
    (b' have', b'<|im_end|>')
    """
    if token_type in PLAIN_TEXT_TYPES:
        return text.encode("utf-8")
    return b"".join(bytes([_CHAR_TO_BYTE[c]]) if c in _CHAR_TO_BYTE else c.encode("utf-8") for c in text)


def sentencepiece_token_bytes(text: str, token_type: int) -> bytes:
    """A SentencePiece vocabulary entry -> the bytes it stands for: '▁' is a space, '<0x0A>' (a
    byte token) the byte 0x0A; control and user-defined tokens are their plain text.

    >>> sentencepiece_token_bytes("▁have", TOKEN_NORMAL), sentencepiece_token_bytes("<0x0A>", TOKEN_BYTE)
    (b' have', b'\\n')
    """
    if token_type == TOKEN_BYTE and (value := byte_token_value(text)) is not None:
        return bytes([value])
    if token_type in PLAIN_TEXT_TYPES:
        return text.encode("utf-8")
    return text.replace(SPACE, " ").encode("utf-8")


def _readable(raw: bytes) -> str:
    """Bytes -> display text: whole UTF-8 characters as themselves (whitespace made visible),
    control characters and broken UTF-8 byte by byte as '<0xNN>'.

    >>> _readable(" a\\n".encode()), _readable("é".encode()[:1])
    ('␣a↵', '<0xC3>')
    """
    out, i = [], 0
    while i < len(raw):
        char, size = _utf8_char_at(raw, i)
        if char is None or (char not in VISIBLE and unicodedata.category(char) == "Cc"):
            out.append(f"<0x{raw[i]:02X}>")
            i += 1
        else:
            out.append(VISIBLE.get(char, char))
            i += size
    return "".join(out)


def _utf8_char_at(raw: bytes, i: int) -> tuple[str | None, int]:
    """The whole UTF-8 character starting at byte i and its length, or (None, 1)."""
    for size in range(1, 5):
        try:
            return raw[i:i + size].decode("utf-8"), size
        except UnicodeDecodeError:
            continue
    return None, 1


def _build_hf(tokens: list[str], merges: list[str], token_types: list[int], pre: PreTokenizer) -> tokenizers.Tokenizer:
    """The Hugging Face tokenizer doing llama.cpp's byte-level BPE over this vocabulary."""
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)  # a repeated entry keeps its first id, as llama.cpp's lookup does
    bpe = models.BPE(vocab=vocab, merges=[_split_merge(m) for m in merges], ignore_merges=pre.ignore_merges)
    hf = tokenizers.Tokenizer(bpe)
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in pre.regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    user = [t for t, k in zip(tokens, token_types) if k == TOKEN_USER_DEFINED]
    if user:  # llama.cpp finds user-defined tokens in text even when control tokens are not parsed
        hf.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])
    return hf


def _merges_as_strings(built: str) -> str:
    """A tokenizers JSON with its BPE merges written "a b" instead of ["a", "b"], which tokenizers
    reads back faster (0.19 -> 0.14 s for the default model's 48,900 merges); as it is when a
    merged token holds a space (the string form could not say where one ends).

    >>> _merges_as_strings('{"model": {"merges": [["Ġ", "t"]]}}')
    '{"model": {"merges": ["Ġ t"]}}'
    """
    data = json.loads(built)
    merges = data["model"].get("merges") or []
    if all(isinstance(m, list) and " " not in m[0] + m[1] for m in merges):
        data["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    return json.dumps(data, ensure_ascii=False)


def _split_merge(merge: str) -> tuple[str, str]:
    """'Ġ t' -> ('Ġ', 't'): split at the first space after the first character, as llama.cpp does."""
    cut = merge.find(" ", 1)
    if cut < 0:
        raise ModelFileError(f"tokenizer merge {merge!r} is not two tokens separated by a space")
    return merge[:cut], merge[cut + 1:]


def _check_model(model: Any) -> None:
    if model not in MODELS:
        raise ModelFileError(f"the tokenizer is of type {model!r}; studygroup reads byte-level BPE ('gpt2': "
                             "SmolLM2, Llama 3) and SentencePiece ('llama': Llama 2, TinyLlama, Mistral)")


def _types(fields: Mapping[str, Any], tokens: list[str], default_eos_id: int) -> list[int]:
    """Each entry's type as llama.cpp reads it: the file's (normal where it gives none), overridden by text."""
    types = lookup(fields, "tokenizer.ggml.token_type", list, items=int)
    if types is not None and len(types) != len(tokens):
        return types  # refused by Tokenizer, which names both lengths
    named = {key: lookup(fields, f"tokenizer.ggml.{key}", int)
             for key in {*NAMED_ENDS, *(key for keys, _ in FILL_IN_THE_MIDDLE for key in keys)}}
    named["eos_token_id"] = default_eos_id if named["eos_token_id"] is None else named["eos_token_id"]
    return llama_cpp_token_types(tokens, types if types is not None else [TOKEN_NORMAL] * len(tokens), named)


def _check_merges(merges: list[str], vocabulary: set[str]) -> None:
    """Every merge "a b" joins two tokens of the vocabulary into a third.

    >>> _check_merges(["a b"], {"a", "b", "ab"})
    >>> _check_merges(["a c"], {"a", "b", "ab"})
    Traceback (most recent call last):
    studygroup.errors.ModelFileError: tokenizer.ggml.merges: merge 0 ('a c') names 'c', which is not a token of the vocabulary; the file is damaged
    """
    for i, merge in enumerate(merges):
        parts = _split_merge(merge)
        for part in (*parts, "".join(parts)):
            if part not in vocabulary:
                raise ModelFileError(f"tokenizer.ggml.merges: merge {i} ({merge!r}) names {part!r}, which is not "
                                     "a token of the vocabulary; the file is damaged")
