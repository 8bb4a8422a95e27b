"""Write tests/data/reference_qwen/: transformers' token ids and next-token logits for the two
packaged Qwen2.5-Coder files (0.5B and 1.5B Instruct, Q4_K_M).

For each model, the tokenizer transformers builds from the GGUF tokenizes every text of TEXTS (plain
text: no chat markup); the model transformers builds from the same GGUF, dequantized to float32 with
eager attention, computes the last-position logits of the prompts LOGITS[name] picks, on those ids.
tests/model/test_qwen_reference.py holds studygroup to both; see reference_qwen/README.md.

    .venv/bin/pip install transformers==5.24.0 accelerate gguf
    PYTHONPATH=. .venv/bin/python tests/data/make_qwen_reference.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from make_gemma_reference import transformers_from_gguf
from make_reference import transformers_logits

OUT = Path(__file__).resolve().parent / "reference_qwen"
# A module of a few hundred tokens, cut where the next token is clear.
LONG = '''"""A study group that meets every week: who comes, what they read, and what they ask."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Member:
    """One member of the group: a name and the questions they bring."""

    name: str
    questions: list[str] = field(default_factory=list)

    def ask(self, question: str) -> None:
        self.questions.append(question)


@dataclass
class StudyGroup:
    """The members, and the chapter they read this week."""

    chapter: int
    members: list[Member] = field(default_factory=list)

    def join(self, member: Member) -> None:
        if any(m.name == member.name for m in self.members):
            raise ValueError(f"{member.name} is already a member")
        self.members.append(member)

    def questions(self) -> list[str]:
        """Every question asked this week, in the order the members joined."""
        return [q for m in self.members for q in m.questions]

    def leave(self, name: str) -> Member:
        """Remove the member called `name` and return them."""
        for i, m in enumerate(self.members):
            if m.name == name:
                return self.members.pop(i)
        raise KeyError(f"no member is called {name}")

    def next_week(self) -> StudyGroup:
        """The same members, the next chapter, no questions yet."""
        return StudyGroup(self.chapter + 1, [Member(m.name) for m in self.members])

    def busiest(self) -> Member:
        """The member who asked the most questions."""
        return max(self.members, key=lambda m: len(m.'''
TEXTS = [
    "Cash or credit card? I have a lot",
    "def fibonacci(n):\n    if n <",
    "The quick brown fox jumps over the lazy",
    "Café crème brûlée — très",
    "3 + 4 = 7, 12 + 30 =",
    "Line one\nLine two 🙂\n\tTabbed",
    "  Two spaces, then   three, and a trailing space ",
    "日本の首都は",
    "for (int i = 0; i < 10; ++i) {\n\t\tsum += a[i] * 2;\n}",
    "It's 2024-05-17T12:34:56Z; don't we'll they've ÄÖÜ äöü ß",
    LONG,
]
# Indices into TEXTS; the 1.5B on one short prompt (its test loads it from the GGUF: the pass is the cheap part).
LOGITS = {"qwen2.5-coder-0.5b": [0, 1, 3, 7, 10], "qwen2.5-coder-1.5b": [1]}


def reference(name: str) -> dict:
    """One model's ids on every text and logits on its prompts (the .npy files written here)."""
    from studygroup.model.packaged import model_file

    tokenizer, hf = transformers_from_gguf(Path(model_file(name)))
    texts = []
    for index, text in enumerate(TEXTS):
        ids = tokenizer(text)["input_ids"]
        entry = {"index": index, "text": text, "hf_token_ids": ids}
        if index in LOGITS[name]:
            logits = transformers_logits(hf, ids)
            np.save(OUT / f"{name}_{index:02d}_hf.npy", logits.astype(np.float32))
            entry["hf_top1"] = int(logits.argmax())
        texts.append(entry)
        print(f"{name} {index:2d} T={len(ids):3d} top1 {entry.get('hf_top1')}")
    return {"name": name, "texts": texts}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    OUT.mkdir(parents=True, exist_ok=True)
    models = [reference(name) for name in LOGITS]
    (OUT / "qwen.json").write_text(json.dumps(models, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
