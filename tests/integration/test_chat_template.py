"""Chat templates on the tiny model (its file has none): the one-line refusal, and templates set here,
each rendered independently by jinja2 itself; the reference ids are the rendering's BOS text as the
BOS id (a control token) and the rest tokenized as plain text."""
import jinja2
import pytest

from integration.test_cli import cli, tiny  # noqa: F401 (tiny: a fixture)
from studygroup.errors import StudyGroupError

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
