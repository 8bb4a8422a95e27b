"""Generation as text: words streamed as they come, how it ended, two continuations compared."""
from __future__ import annotations

from studygroup.formats import percent


class Stream:
    """The text of each new word, as bytes allow: a character split over two tokens is printed
    once its last byte has come. The prompt comes with the first word (nothing is printed before
    the first word is chosen: a refused request prints nothing)."""

    def __init__(self, tokenizer, prompt: str):
        self.tokenizer, self.ids, self.shown, self.prompt = tokenizer, [], "", prompt

    def add(self, id: int) -> str:
        """The new text that `id` completes ("" while a character is unfinished)."""
        prompt, self.prompt = self.prompt, ""
        return prompt + self._new(id)

    def _new(self, id: int) -> str:
        self.ids.append(id)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd") or not text.startswith(self.shown):
            return ""
        new, self.shown = text[len(self.shown):], text
        return new

    def rest(self) -> str:
        """What is held back at the end (bytes that never became a character: '�')."""
        text = self.tokenizer.decode(self.ids)
        return text[len(self.shown):] if text.startswith(self.shown) else ""


def generation_end(g) -> str:
    """One line on how the generation ended."""
    if g.stop == "eos":
        return f"(the model ended the text after {len(g.words)} words: {g.words[-1].id} is its end-of-text token)"
    return f"({len(g.words)} words)"


def taken_out(ablation: dict, heads: bool, members: bool) -> str:
    """How a generation's silenced heads and members were taken out, after "With … taken out"
    (`studygroup.model.generation_ablation`)."""
    what = " and ".join((["each head's output"] if heads else []) + (["each member's key and value"] if members else []))
    if ablation["kind"] == "resample":
        return f" by resample ablation ({what} taken from the other text followed by the same words)"
    n = ablation["reference"]
    over = "the prompt's members" if not n else f"every member of the reference text{'s' if n > 1 else ''}"
    means = "its mean" if not members else "their means" if heads else "their mean"
    return f" by mean ablation ({what} replaced by {means} over {over})"


def continuations(c) -> str:
    """Both continuations and where they part."""
    what = ", ".join([f"member {j}" for j in c.silenced_members] + [f"head {l}.{h}" for l, h in c.silenced_heads])
    opening = f"Without {what}" if c.ablation is None else \
        f"With {what} taken out{taken_out(c.ablation, bool(c.silenced_heads), bool(c.silenced_members))}"
    lines = [f"{opening}, the group continues:", f"  {c.silenced!r}", f"instead of:", f"  {c.whole!r}"]
    p = c.parting
    if p is None:
        lines.append("The two continuations are the same.")
        return "\n".join(lines)
    lines += [f"They part at word {p.word}: {p.silenced_token!r} instead of {p.whole_token!r}.",
              f"  whole group:    p({p.whole_token!r}) = {percent(p.prob_whole_in_whole)}, "
              f"p({p.silenced_token!r}) = {percent(p.prob_silenced_in_whole)}",
              f"  silenced group: p({p.whole_token!r}) = {percent(p.prob_whole_in_silenced)}, "
              f"p({p.silenced_token!r}) = {percent(p.prob_silenced_in_silenced)}"]
    return "\n".join(lines)
