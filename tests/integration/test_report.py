"""Self-contained HTML (report and notebook): data embedded safely, nothing fetched, unique ids.
(The browser tests open these files in chromium with the network cut.)"""
from __future__ import annotations

import sys
import types
import html.parser
import json
import re

import pytest

import studygroup
from conftest import write_tiny_gguf
from studygroup.views import payloads
from studygroup.views import report

MARKUP = "a </script><img src=x onerror=alert(1)> & {{7*7}} \u2028 \"q\" 'x' <!-- <s>"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The tiny model, with the markup as whole tokens (the text fits its 64-token context)."""
    tokens = ["</script>", "<img src=x onerror=alert(1)>", "{{7*7}}", "<!--"]
    return studygroup.load(write_tiny_gguf(tmp_path_factory.mktemp("m") / "m.gguf", user_tokens=tokens).path)


@pytest.fixture(scope="module")
def explanation(model):
    return studygroup.explain(model, MARKUP)


class Parts(html.parser.HTMLParser):
    """Tags, ids, script blocks and every URL-ish attribute of a document."""

    def __init__(self):
        super().__init__()
        self.tags, self.ids, self.scripts, self.urls, self._in = [], [], [], [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "id" in a:
            self.ids.append(a["id"])
        self.urls += [v for k, v in attrs if k in ("src", "href", "action", "srcset") and v]
        if tag == "script":
            self._in = [a.get("type"), a.get("id"), ""]

    def handle_data(self, data):
        if self._in is not None:
            self._in[2] += data

    def handle_endtag(self, tag):
        if tag == "script" and self._in is not None:
            self.scripts.append(tuple(self._in))
            self._in = None


def parse(text: str) -> Parts:
    p = Parts()
    p.feed(text)
    return p


def test_embed_json_escapes_what_could_end_the_block():
    text = report.embed_json({"t": MARKUP})
    assert not re.search(r"[<>&\u2028\u2029]", text)
    assert json.loads(text) == {"t": MARKUP}


def test_report_is_self_contained_and_its_data_round_trips(model, tmp_path):
    data = payloads.report_data(model, MARKUP, text_a="a lot")
    path = report.write_report(data, tmp_path / "r.html")
    text = path.read_text(encoding="utf-8")
    p = parse(text)
    assert p.urls == []  # no src, no href: nothing to fetch
    assert not re.search(r"https?://|@import|url\(", text)
    blocks = [s for s in p.scripts if s[0] == "application/json"]
    assert len(blocks) == 1 and json.loads(blocks[0][2]) == json.loads(json.dumps(data))
    assert "img" not in p.tags and p.tags.count("script") == 3  # data, page script, mount
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', text).group(1)
    assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp and "connect-src" not in csp
    assert set(data["heads"]) == {f"{h['layer']}.{h['head']}" for h in data["explanation"]["heads"][:3]}
    assert all(set(v) == {"paper", "columns"} for v in data["heads"].values())


def test_script_hashes_match_the_inline_scripts(explanation):
    import base64
    import hashlib

    text = report.report_html(explanation)
    hashes = set(re.findall(r"'sha256-([^']+)'", text))
    inline = [s[2] for s in parse(text).scripts if s[0] is None]
    assert len(inline) == 2
    for s in inline:
        assert base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() in hashes


def test_page_report_and_notebook_use_one_script_in_the_listed_order(model, explanation):
    from fastapi.testclient import TestClient

    from studygroup.views import assets
    from studygroup.web.app import create_app

    script = assets.page_script()
    starts = [script.index(assets.static_text(name)) for name in assets.SCRIPTS]
    assert starts == sorted(starts) and script.startswith("window.StudyGroup = ")
    for text in (report.report_html(explanation), report.notebook_html(explanation)):
        inline = [s[2] for s in parse(text).scripts if s[0] is None]
        assert inline[0] == script
    with TestClient(create_app(model)) as client:
        assert client.get("/static/page.js").text == script


def test_every_call_has_its_own_ids(explanation):
    a, b = report.notebook_html(explanation), report.notebook_html(explanation)
    ids = parse(a + b).ids
    assert len(ids) == 4 and len(set(ids)) == 4
    assert "<html" not in a and "sg-nb" in a


def test_fallback_text_is_escaped(explanation):
    text = report.notebook_html(explanation)
    fallback = text.split('<script type="application/json"', 1)[0]
    assert "<img" not in fallback and "&lt;img␣src=x␣onerror=alert(1)&gt;" in fallback


def test_view_data_accepts_explanations_comparisons_and_dicts(model, explanation):
    assert report.view_data(explanation)["kind"] == "explanation"
    assert report.view_data(explanation.to_dict())["explanation"]["tokens"] == explanation.tokens
    c = studygroup.compare(model, "a lot", "I have a lot")
    assert report.view_data(c)["comparison"]["b"]["text"] == "I have a lot"
    assert report.view_data(c.to_dict())["kind"] == "comparison"
    with pytest.raises(ValueError):
        report.view_data({"nothing": 1})
    with pytest.raises(TypeError):
        report.view_data(3)


def test_explanations_render_themselves_in_notebooks(explanation, monkeypatch):
    """In IPython, the library's first use registers the page's views as explain's HTML."""
    registered = {}

    class Formatter:
        def for_type(self, kind, render):
            registered[kind] = render

    shell = types.SimpleNamespace(display_formatter=types.SimpleNamespace(formatters={"text/html": Formatter()}))
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    monkeypatch.setattr(studygroup, "_ready", False)
    studygroup.load  # the first use
    render = registered[type(explanation)]
    a, b = render(explanation), render(explanation)
    assert 'class="sg-root sg-nb"' in a and parse(a).ids != parse(b).ids


def test_no_notebook_no_registration(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    monkeypatch.setattr(studygroup, "_ready", False)
    studygroup.load
    assert studygroup._ready


def test_report_data_reuses_a_given_explanation(model, explanation, monkeypatch):
    def no(*args, **kwargs):
        raise AssertionError("explained again")
    monkeypatch.setattr(payloads, "explanation", no)
    data = payloads.report_data(model, MARKUP, explained=explanation, heads=1)
    assert data["explanation"] == explanation.to_dict() and len(data["heads"]) == 1
