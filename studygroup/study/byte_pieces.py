"""What a byte piece stands for, in words.

A vocabulary without a token for some character (SmolLM2 has few for Japanese) spells it in its
UTF-8 bytes, one or two to a token ('<0xE3><0x82>'): such a token is only part of a character.
A next word like that either completes a character begun by the last bytes of the text, or begins
one that the words after it would finish; which characters it may begin is fixed by its bytes.
"""
from __future__ import annotations

import codecs
import unicodedata

BYTE_PIECE = ("<0x..> is a byte piece: the vocabulary has no token for the whole character, so the model writes "
              "it in its UTF-8 bytes, one or two to a token, and a word here may be only part of a character")
LONE_SPACE = "␣ alone is a space written as its own token: the word after the space would be the next token"


def reads_as(before: bytes, word: bytes) -> str:
    """What `word`'s bytes stand for after the text's bytes `before`; '' when they are whole characters.

    >>> reads_as("公園".encode()[:-1], "園".encode()[-1:])
    'completes “園” with the bytes before it'
    >>> reads_as(b"", "を".encode()[:2])
    'the first 2 of the 3 bytes of a character from U+3080 “む” to U+30BF “タ”'
    """
    tail = _unfinished(before)
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        done = decoder.decode(tail + word)
    except UnicodeDecodeError:
        return "bytes that are no part of a whole character here"
    left = decoder.getstate()[0]
    if not tail and not left:
        return ""
    if tail and not done:  # it carries on the character the text began, without finishing it
        return f"with the bytes before it, {_begins(left)}"
    rest = f", then “{done[1:]}”" if tail and done[1:] else ""
    parts = [f"completes “{done[0]}” with the bytes before it{rest}"] if tail else []
    return "; then ".join(parts + ([_begins(left)] if left else []))


def _unfinished(raw: bytes) -> bytes:
    """The bytes at the end of `raw` that begin a character it does not finish (b"" if none)."""
    for size in (1, 2, 3):
        lead = raw[-size:]
        if len(lead) == size and _length(lead[0]) > size and all(0x80 <= b < 0xC0 for b in lead[1:]):
            return lead
    return b""


def _length(lead: int) -> int:
    """The byte count of a UTF-8 character from its first byte (1 for a byte that cannot begin one)."""
    return 2 if 0xC2 <= lead < 0xE0 else 3 if 0xE0 <= lead < 0xF0 else 4 if 0xF0 <= lead < 0xF5 else 1


def _begins(left: bytes) -> str:
    """'the first 2 of the 3 bytes of a character from U+3080 “む” to U+30BF “タ”' for b'\\xe3\\x82'."""
    size = _length(left[0])
    low, high = (_completion(left, size, order) for order in (range(0x80, 0xC0), range(0xBF, 0x7F, -1)))
    return (f"the first {len(left)} of the {size} bytes of a character from {_code_point(low)} "
            f"to {_code_point(high)}")


def _completion(left: bytes, size: int, order: range) -> str:
    """The first character in `order` of continuation bytes that begins with `left`."""
    raw = left
    while len(raw) < size:
        fill = order[0]
        raw += next(bytes([b]) for b in order if _valid(raw + bytes([b]) + bytes([fill]) * (size - len(raw) - 1)))
    return raw.decode("utf-8")


def _valid(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _code_point(char: str) -> str:
    shown = unicodedata.category(char) not in ("Cn", "Co", "Cs", "Cc")
    return f"U+{ord(char):04X}" + (f" “{char}”" if shown else "")
