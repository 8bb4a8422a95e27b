"""Chat templates on the tiny model (its file has none): the one-line refusal, and templates set here,
each rendered independently by jinja2 itself; the reference ids are the rendering's BOS text as the
BOS id (a control token) and the rest tokenized as plain text."""
import time

import jinja2
import pytest

from conftest import write_tiny_gguf
from integration.test_cli import cli, tiny  # noqa: F401 (tiny: a fixture)
from studygroup.errors import ModelFileError, StudyGroupError
from studygroup.gguf import template_sandbox

TRIMMING = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] | trim }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"
PLAIN = "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }};{% endfor %}"


@pytest.fixture
def templated(model, monkeypatch):
    def use(template):
        monkeypatch.setattr(model.tokenizer, "chat_template", template)
        return model
    return use


@pytest.mark.parametrize("command", ["generate", "explain"])
def test_a_model_without_a_template_says_so_in_one_line(capsys, tiny, command):
    code, out, err = cli(capsys, command, "the tin", "--chat", "--model", tiny)
    assert code == 2 and out == "" and err.count("\n") == 1 and "has no chat template" in err


def test_system_without_chat_is_refused(capsys, tiny):
    code, _, err = cli(capsys, "generate", "the tin", "--system", "be kind", "--model", tiny)
    assert code == 2 and err.count("\n") == 1 and "--system goes with --chat" in err


@pytest.mark.parametrize("template", [TRIMMING, PLAIN])
@pytest.mark.parametrize("text, system", [("  the tin \n", None), ("the tin", " a cat ")])
def test_ids_are_the_jinja_rendering_tokenized(templated, template, text, system):
    model = templated(template)
    chat = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    tok = model.tokenizer
    bos = tok.tokens[tok.bos_id]
    rendered = env.from_string(template).render(messages=chat, add_generation_prompt=True, bos_token=bos, eos_token="")
    first = [tok.bos_id] if rendered.startswith(bos) else []
    rest = tok.encode(rendered.removeprefix(bos))
    assert model.chat(text, system) == first + (rest[1:] if tok.add_bos else rest)


@pytest.mark.parametrize("template, words", [("{{ messages[0]['content'] | upper }}", "changes the message's text"),
                                             ("{{ raise_exception('only user turns') }}", "only user turns"),
                                             ("{{ ''.__class__.__mro__ }}", "cannot be rendered")])
def test_templates_it_cannot_follow_are_refused(templated, template, words):
    with pytest.raises(StudyGroupError, match=words):
        templated(template).chat("the tin")


# The fault sweep's templates (issue 33, A1): each a valid Jinja template that would hang or exhaust
# the process, refused in one line naming the file.
HOSTILE = {"{{ 'x' * 500000000 }}": "repeats a text or list to 500000000 items",
           "{% for i in range(100000000) %}x{% endfor %}": "Range too big",
           "{% for i in range(100000) %}{{ 'abcdefghij' * 10 }}{% endfor %}": "writes more than",
           "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}":
               "MiB of memory",
           "{{ 1 / 0 }}": "ZeroDivisionError"}


@pytest.mark.parametrize("template", HOSTILE)
def test_a_hostile_template_in_the_file_is_one_line_naming_it(capsys, tmp_path, template):
    path = write_tiny_gguf(tmp_path / "hostile.gguf", metadata={"tokenizer.chat_template": template}).path
    code, out, err = cli(capsys, "generate", "the tin", "--chat", "--model", path, "-n", 1)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}: this model's chat template " in err and HOSTILE[template] in err and "leave out --chat" in err


def test_a_template_that_runs_too_long_is_stopped(templated, monkeypatch):
    monkeypatch.setattr(template_sandbox, "TIME_LIMIT_S", 2.0)
    model = templated("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    started = time.monotonic()
    with pytest.raises(ModelFileError, match="chat template ran past 2 s"):
        model.chat("the tin")
    assert time.monotonic() - started < 10
