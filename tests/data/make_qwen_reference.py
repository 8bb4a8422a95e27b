"""Write tests/data/reference_qwen/: llama.cpp's and transformers' token ids, and next-token logits,
for the two packaged Qwen2.5-Coder files (0.5B and 1.5B Instruct, Q4_K_M).

For each model and each text of TEXTS (plain text: no chat markup):
- llama.cpp (llama-cpp-python) tokenizes the text as a user's typed text (BOS as the file asks:
  none) and computes its last-position logits on the GGUF as it is (quantized weights, 8-bit
  activations); its ids, its ten most likely next tokens and the logit margin of its top-1 over its
  second are kept (not its logits: studygroup is compared with it on ids and top-1 only);
- the tokenizer transformers builds from the GGUF tokenizes the text, and the model transformers
  builds from the same GGUF, dequantized to float32 with eager attention, computes the last-position
  logits of the texts LOGITS[name] picks, on those ids (kept as .npy files).
tests/model/test_qwen_reference.py holds studygroup to both; see reference_qwen/README.md.

    bash bench/build_llama.sh        # once: llama-cpp-python into .bench/llama
    .venv/bin/pip install transformers==5.24.0 accelerate gguf
    PYTHONPATH=.bench/llama:. .venv/bin/python tests/data/make_qwen_reference.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from make_gemma_reference import transformers_from_gguf
from make_reference import llama_cpp_logits, llama_cpp_model, llama_cpp_words, softmax, top_words, transformers_logits

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
    # A module of 1,994 tokens, cut where the next token finishes a name written above.
    (Path(__file__).resolve().parent / "qwen_long_prompt.txt").read_text(encoding="utf-8"),
]
# Indices into TEXTS of the prompts whose transformers logits are kept.
LOGITS = {"qwen2.5-coder-0.5b": [0, 1, 3, 7, 10, 11], "qwen2.5-coder-1.5b": [1, 11]}
N_CTX = 2048  # llama.cpp's context and batch: the longest text in one batch


def llama_cpp_reference(path: Path) -> tuple[str, list[dict]]:
    """(llama-cpp-python's version, per text: llama.cpp's ids, its top 10 and its top-1's logit margin)."""
    import llama_cpp

    llm = llama_cpp_model(path, N_CTX)
    runs, words = llama_cpp_logits(llm, TEXTS), llama_cpp_words(llm)
    out = []
    for ids, logits in runs:
        first, second = np.sort(logits)[-2:][::-1]
        out.append({"token_ids": list(map(int, ids)), "top10": top_words(softmax(logits), words),
                    "llama_cpp_margin": round(float(first - second), 4)})
    return llama_cpp.__version__, out


def reference(name: str) -> dict:
    """One model's ids on every text from both, and transformers' logits on its prompts (the .npy files)."""
    from studygroup.model.packaged import model_file

    path = Path(model_file(name))
    version, llama = llama_cpp_reference(path)
    tokenizer, hf = transformers_from_gguf(path)
    texts = []
    for index, (text, theirs) in enumerate(zip(TEXTS, llama)):
        ids = tokenizer(text)["input_ids"]
        entry = {"index": index, "text": text, "token_ids": theirs["token_ids"], "hf_token_ids": ids,
                 "top10": theirs["top10"], "llama_cpp_margin": theirs["llama_cpp_margin"]}
        if index in LOGITS[name]:
            logits = transformers_logits(hf, ids)
            np.save(OUT / f"{name}_{index:02d}_hf.npy", logits.astype(np.float32))
            entry["hf_top1"] = int(logits.argmax())
        texts.append(entry)
        print(f"{name} {index:2d} T={len(ids):4d} same ids {ids == theirs['token_ids']} llama.cpp top1 "
              f"{theirs['top10'][0]['token']!r} (margin {theirs['llama_cpp_margin']}) hf top1 {entry.get('hf_top1')}")
    return {"name": name, "llama_cpp_python": version, "texts": texts}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    OUT.mkdir(parents=True, exist_ok=True)
    models = [reference(name) for name in LOGITS]
    (OUT / "qwen.json").write_text(json.dumps(models, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
