"""A model's own chat template (`tokenizer.chat_template` in its GGUF): messages -> token ids.

The template is Jinja, rendered in jinja2's immutable sandbox with what chat templates expect
(`messages`, `add_generation_prompt`, `bos_token`, `eos_token`, `raise_exception`, `strftime_now`,
the `tojson` filter; trim_blocks and lstrip_blocks), as transformers renders it; the rendering runs
in a child process bounded in time, memory and output (`studygroup.gguf.template_sandbox`), since
the template is code from the model file.

The template's markup and the messages' text are told apart, so that a user who types
"<|im_end|>" writes text, not markup: the template is rendered once with a placeholder for each
message's text, which gives the markup pieces between them; control-token text in the markup
becomes the control tokens' ids, and every run of plain text (markup text and the messages' text
between two control tokens) is tokenized as plain text, in which control tokens are never matched.
Rendered once more with the real text, the result must equal the pieces put together (a template
that changes a message's text beyond trimming it is refused). No BOS is added beyond what the
template writes.

>>> ids = chat_ids(model.tokenizer, [{"role": "user", "content": "Hi"}])
>>> model.tokenizer.decode(ids).split("<|im_end|>\\n")[-2:]
['<|im_start|>user\\nHi', '<|im_start|>assistant\\n']
"""
from __future__ import annotations

import re
import secrets

from studygroup.errors import InputError, ModelFileError
from studygroup.gguf.template_sandbox import TemplateLimitError, render_bounded

#: Whitespace around each placeholder, which `trim` removes and no template writes (U+2029, paragraph separator).
PAD = "\u2029"
MAX_MARKUP_CHARS = 1_000_000  # what a template may write besides the messages' text (real ones: a few thousand)


def messages(text: str, system: str | None = None) -> list[dict[str, str]]:
    """The chat of one user text, after a system text when given.

    >>> messages("Hi", system="Be brief.")
    [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}]
    """
    return ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": text}]


def chat_ids(tokenizer, chat: list[dict[str, str]], add_generation_prompt: bool = True) -> list[int]:
    """Token ids of `chat` (a list of {"role", "content"}) wrapped by the tokenizer's chat template,
    ending with the assistant's turn opened (add_generation_prompt). InputError if the model has
    no template."""
    template = tokenizer.chat_template
    if not template:
        raise InputError("this model's file has no chat template (tokenizer.chat_template): it cannot be asked as a chat")
    ids, run = [], ""
    for piece, is_markup in _pieces(tokenizer, template, chat, add_generation_prompt):
        for part, control_id in (_split_controls(tokenizer, piece) if is_markup else [(piece, None)]):
            if control_id is None:
                run += part
            else:
                ids += _plain(tokenizer, run) + [control_id]
                run = ""
    return ids + _plain(tokenizer, run)


def _plain(tokenizer, text: str) -> list[int]:
    """Ids of plain text, without the BOS the tokenizer may put first."""
    if not text:
        return []
    ids = tokenizer.encode(text)
    return ids[1:] if tokenizer.add_bos else ids


def _pieces(tokenizer, template: str, chat, add_generation_prompt: bool) -> list[tuple[str, bool]]:
    """The rendered chat as (text, is_markup) pieces, in order: the template's markup, and each
    message's text as the template wrote it."""
    marks = [f"\x02{secrets.token_hex(8)}\x03" for _ in chat]
    spaced = [{**m, "content": f"{PAD}{mark}{PAD}"} for m, mark in zip(chat, marks)]  # a trimming template drops the pads
    rendered, real = render(tokenizer, template, [spaced, chat], add_generation_prompt)
    pieces, at = [], 0
    for m, mark in zip(chat, marks):
        found = rendered.find(mark, at)
        if found < 0:  # the template left this message out
            continue
        left, right = rendered[found - 1:found] == PAD, rendered[found + len(mark):found + len(mark) + 1] == PAD
        pieces.append((rendered[at:found - left], True))
        content = m["content"] if left and right else m["content"].strip()  # what the template wrote
        pieces.append((content, False))
        at = found + len(mark) + right
    pieces.append((rendered[at:], True))
    if "".join(p for p, _ in pieces) != real:
        raise ModelFileError("this model's chat template changes the message's text (beyond trimming it): "
                             "studygroup cannot tell its markup from your text; leave out --chat")
    return pieces


def render(tokenizer, template: str, chats: list, add_generation_prompt: bool = True) -> list[str]:
    """The template rendered on each chat of `chats`, as texts, within `template_sandbox`'s limits:
    at most MAX_MARKUP_CHARS beyond twice the chat's text (a template may write a message twice)."""
    names = {name: _token_text(tokenizer, getattr(tokenizer, f"{name}_id")) for name in ("bos", "eos")}
    limit = MAX_MARKUP_CHARS + 2 * max(sum(len(m["content"]) for m in chat) for chat in chats)
    try:
        return render_bounded(template, chats, add_generation_prompt, names["bos"], names["eos"], limit)
    except TemplateLimitError as e:
        raise ModelFileError(f"this model's chat template {e}; leave out --chat") from None


def _token_text(tokenizer, id: int | None) -> str:
    return "" if id is None else tokenizer.tokens[id]


def _split_controls(tokenizer, markup: str) -> list[tuple[str, int | None]]:
    """Markup cut at control tokens' text (longest first): [(text, None) or (token text, its id)]."""
    pattern, ids = _controls(tokenizer)
    if pattern is None:
        return [(markup, None)]
    parts = pattern.split(markup)  # odd positions: the control tokens found
    return [(p, ids[p] if k % 2 else None) for k, p in enumerate(parts) if p]


def _controls(tokenizer):
    """(a regex matching any control token's text, {text: id}); (None, {}) when there are none."""
    from studygroup.gguf.tokenizer import TOKEN_CONTROL

    ids = {t: i for i, (t, k) in enumerate(zip(tokenizer.tokens, tokenizer.token_types)) if k == TOKEN_CONTROL and t}
    if not ids:
        return None, {}
    texts = sorted(ids, key=lambda t: (-len(t), t))
    return re.compile("(" + "|".join(map(re.escape, texts)) + ")"), ids
