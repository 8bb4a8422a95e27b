"""`POST /api/generate`: words streamed one JSON line each, from generations kept to go on from.

A generation is kept by its prompt, settings and silencing with its ablation (the last few, bounded in bytes of
key/value cache), so that a request for more words after the ones the page has goes on from the
kept cache instead of passing the prompt again. A request whose kept generation is gone makes it
again (same settings, same seed: the same words) and checks it gives the words the page has.

Everything that can be refused is refused before the first line (a 4xx with {"error"}); the
stream is one line per word, in the model's turn (the gate), and stops early when the client goes.
"""
from __future__ import annotations

import asyncio
import json
import threading

from fastapi.responses import StreamingResponse

from studygroup.errors import InputError
from studygroup.model.generate import start
from studygroup.model.sampling import Sampling
from studygroup.web.guard import LRU

_END = object()


class _Gone(Exception):
    """The client stopped reading."""


class Generations:
    """Generations by (prompt ids, settings, silencing), least recently used dropped first."""

    def __init__(self, entries: int, max_bytes: int):
        self.kept = LRU(entries, max_bytes)

    def continuation(self, model, key: tuple, ids: list[int], words: list[int], settings: dict, n: int):
        """A generation of `ids` whose words so far are `words`: the kept one, or made again."""
        g = self.kept.get(key)
        if g is not None and g.ids[:len(words)] == words:
            return g
        g = start(model, ids, **settings, capacity=len(words) + n)
        if words and g.more(len(words)).ids != words:
            raise InputError("words: these are not the words the model says after this text with these settings "
                             "(send the ids this endpoint streamed, or none)")
        return g

    def keep(self, key: tuple, g) -> None:
        self.kept.put(key, g, g.nbytes)


def prompt(service, b) -> list[int]:
    """The body's prompt ids: its text's, or with b.chat the text as the user's turn in the model's
    own chat template (after b.system's turn when given). InputError past the app's limit."""
    if b.system is not None and not b.chat:
        raise InputError("system goes with chat: true (a system turn in the model's chat template)")
    if not b.chat:
        service.check_text(b.text)
        return service.model.ids(b.text)
    ids = service.model.chat(b.text, b.system)
    if len(ids) > service.max_tokens:
        raise InputError(f"the chat is {len(ids)} tokens long: this app takes at most {service.max_tokens}")
    return ids


def settings(b, interventions) -> dict:
    """The body's generation settings as start() takes them, with what its interventions silence and
    how (sampling checked here: InputError)."""
    sampling = Sampling(b.temperature, b.top_k, b.top_p, b.seed)
    return dict(sampling=sampling, ignore_eos=b.ignore_eos, candidates=b.candidates, ablation=interventions.ablation,
                silence_members=interventions.silenced_members, silence_heads=sorted(interventions.silenced_heads))


async def stream(service, b, ids: list[int], key: tuple, kw: dict, head) -> StreamingResponse:
    """The words after b.words as NDJSON lines ({"word": k, token, id, prob, logit, top, stop?,
    listened?}); errors before the first line are raised here (the app answers them 4xx)."""
    loop, queue, gone = asyncio.get_running_loop(), asyncio.Queue(), threading.Event()
    words = list(b.words)

    def send(g, k: int) -> None:
        if gone.is_set():
            raise _Gone
        line = json.dumps({"word": k, **g.word_json(k, head)}, ensure_ascii=False, allow_nan=False) + "\n"
        loop.call_soon_threadsafe(queue.put_nowait, line.encode("utf-8"))

    def work():
        g = service.generations.continuation(service.model, key, ids, words, kw, b.n)
        try:
            end = min(len(g.words), len(words) + b.n)
            for k in range(len(words) + 1, end + 1):  # kept words past the page's
                send(g, k)
            if len(words) + b.n > len(g.words) and not g.stop:
                g.more(len(words) + b.n - len(g.words), on_word=lambda w: send(g, len(g.words)))
        except _Gone:
            pass
        service.generations.keep(key, g)

    task = asyncio.ensure_future(service.gate.run(work))
    task.add_done_callback(lambda t: queue.put_nowait(_END))
    first = await queue.get()
    if first is _END:
        task.result()  # the refusal, raised for the app's handlers; else no words (the text had ended)

    async def lines():
        try:
            item = first
            while item is not _END:
                yield item
                item = await queue.get()
            if task.exception() is not None:  # after the first line: said as the last line
                yield json.dumps({"error": str(task.exception())}).encode("utf-8") + b"\n"
        finally:
            gone.set()

    return StreamingResponse(lines(), media_type="application/x-ndjson")
