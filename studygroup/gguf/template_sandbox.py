"""A chat template rendered in a child process that cannot hang or exhaust this one.

A template is code written by whoever made the model file: `{{ 'x' * 500000000 }}` or two nested
loops of 100,000 each are valid Jinja. So it is rendered by this file run as a script, in a child
Python that imports nothing of studygroup, inside jinja2's immutable sandbox, with
  - `range` at most 100,000 items (jinja2's sandbox), a text or list repeated by `*` to at most
    `limit` items, and the output cut at `limit` characters (streamed with `generate()`);
  - at most MAX_MEMORY_BYTES of address space (the operating system's limit, where it has one);
  - at most TIME_LIMIT_S seconds, after which the child is killed.
Whatever the template does wrong comes back as one line (`TemplateLimitError`), which reads after
"the chat template".

>>> render_bounded("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}{% endfor %}",
...                [[{"role": "user", "content": "Hi"}]], True, "<s>", "</s>", 100)
['user: Hi']
"""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime

TIME_LIMIT_S = 10.0  # the child's start (~0.1 s) and every rendering; a real template takes milliseconds
MAX_MEMORY_BYTES = 1 << 30  # the child's address space: Python and jinja2 take ~0.1 GB of it


class TemplateLimitError(Exception):
    """A template that cannot be rendered, or not within the limits, in one line."""


def render_bounded(template: str, chats: list, add_generation_prompt: bool, bos_token: str, eos_token: str,
                   limit: int) -> list[str]:
    """The template rendered on each chat of `chats` (each a list of {"role", "content"}), in a child
    process within the module's limits; TemplateLimitError says what went wrong."""
    job = {"template": template, "chats": chats, "add_generation_prompt": add_generation_prompt,
           "bos_token": bos_token, "eos_token": eos_token, "limit": limit}
    try:
        done = subprocess.run([sys.executable, "-I", __file__], input=json.dumps(job), capture_output=True,
                              text=True, encoding="utf-8", timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        raise TemplateLimitError(f"ran past {TIME_LIMIT_S:g} s") from None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        raise TemplateLimitError(f"stopped its renderer (exit status {done.returncode})") from None
    if "error" in answer:
        raise TemplateLimitError(answer["error"])
    return answer["rendered"]


def _render_all(job: dict) -> dict:
    """The child's work: {"rendered": [text per chat]} or {"error": one line}."""
    from jinja2 import TemplateError

    try:
        template = _environment(job["limit"]).from_string(job["template"])
        return {"rendered": [_render(template, chat, job) for chat in job["chats"]]}
    except (TemplateError, OverflowError) as e:  # OverflowError: a range past jinja2's 100,000 items
        return {"error": f"cannot be rendered: {e}"}
    except MemoryError:
        return {"error": f"needs more than {MAX_MEMORY_BYTES >> 20} MiB of memory"}
    except Exception as e:  # whatever else the template's own code raises (1/0, a bad type)
        return {"error": f"cannot be rendered: {type(e).__name__}: {e}"}


def _render(template, chat: list, job: dict) -> str:
    """One chat rendered, streamed and cut past `limit` characters."""
    from jinja2 import TemplateError

    out, size = [], 0
    for piece in template.generate(messages=chat, add_generation_prompt=job["add_generation_prompt"],
                                   bos_token=job["bos_token"], eos_token=job["eos_token"]):
        size += len(piece)
        if size > job["limit"]:
            raise TemplateError(f"it writes more than {job['limit']} characters")
        out.append(piece)
    return "".join(out)


def _environment(limit: int):
    """jinja2's immutable sandbox with what chat templates expect (as transformers renders them) and
    `*` bounded to `limit` items."""
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*"})

        def call_binop(self, context, operator, left, right):
            _check_repeat(left, right, limit)
            return super().call_binop(context, operator, left, right)

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return env


def _check_repeat(left, right, limit: int) -> None:
    """A text or list times a whole number may make at most `limit` items.

    >>> _check_repeat("ab", 3, 10)
    >>> _check_repeat("x", 500000000, 10)
    Traceback (most recent call last):
    jinja2.exceptions.SecurityError: it repeats a text or list to 500000000 items, past 10
    """
    from jinja2.exceptions import SecurityError

    for items, times in ((left, right), (right, left)):
        if isinstance(items, str | list | tuple) and isinstance(times, int) and len(items) * times > limit:
            raise SecurityError(f"it repeats a text or list to {len(items) * times} items, past {limit}")


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str):
    from jinja2 import TemplateError

    raise TemplateError(message)


def _limit_memory() -> None:
    """The child's address space capped at MAX_MEMORY_BYTES (where the system allows it)."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (MAX_MEMORY_BYTES, MAX_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):  # no such limit here (Windows), or a lower one set already
        pass


if __name__ == "__main__":
    _limit_memory()
    json.dump(_render_all(json.load(sys.stdin)), sys.stdout)
