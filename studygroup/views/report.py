"""Self-contained HTML: the web page's views for one text, in a file (report) or a notebook cell.

The page's own script (views/assets.page_script: the files of views/static joined in one order)
and style are inlined, the data is embedded as JSON in a `<script type="application/json">`
block, and nothing is fetched: the file opens from disk
with no server and no network. In the data, `<`, `>`, `&`, U+2028 and U+2029 are written as
\\u escapes, so a token such as `</script>` cannot end the block. Every element id carries a
random suffix, so any number of views can share one notebook. A short plain-HTML summary
(escaped) stands in until the script runs, or for good where scripts do not run.

    >>> from studygroup.views import payloads
    >>> from studygroup.views import report
    >>> report.write_report(payloads.report_data(model, "I have a lot"), "report.html")
    PosixPath('report.html')
"""
from __future__ import annotations

import base64
import hashlib
import json
import uuid
from html import escape
from pathlib import Path

from studygroup.views.assets import page_script, static_text

#: Characters that could end a <script> block or a JavaScript string if left as they are.
_JSON_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def embed_json(data) -> str:
    """JSON safe inside <script type="application/json">: no <, >, & or line separators left bare.

    >>> embed_json({"t": "</script><b>&"})
    '{"t": "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u0026"}'
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    return "".join(_JSON_ESCAPES.get(ch, ch) for ch in text)


def view_data(obj) -> dict:
    """What the page script shows: a report's data (payloads.report_data), or an explanation or
    comparison (object or dict) on its own."""
    if hasattr(obj, "to_dict"):
        kind = type(obj).__name__
        obj = obj.to_dict()
        if kind == "Comparison":
            return {"kind": "comparison", "comparison": obj, "text": obj["b"]["text"]}
    if not isinstance(obj, dict):
        raise TypeError(f"expected an Explanation, a Comparison or report data, not {type(obj).__name__}")
    if "explanation" in obj or "comparison" in obj:
        return obj
    if "a" in obj and "b" in obj and "shift" in obj:
        return {"kind": "comparison", "comparison": obj, "text": obj["b"]["text"]}
    if "tokens" in obj and "story" in obj:
        return {"kind": "explanation", "explanation": obj, "text": obj.get("text")}
    raise ValueError("this dict is neither report data nor an explanation (it needs 'tokens' and 'story')")


def _fallback(data: dict) -> str:
    """A plain, escaped summary shown until (or unless) the script runs."""
    e = data.get("explanation") or (data.get("comparison") or {}).get("b") or {}
    lines = [f"<li>{escape(s)}</li>" for s in (data.get("comparison") or {}).get("story", []) + e.get("story", [])]
    return ('<div class="sg-fallback"><p><b>studygroup</b>: the interactive view needs JavaScript; '
            f'here is its story.</p><ul>{"".join(lines)}</ul></div>')


def _parts(data: dict, uid: str, cls: str = "sg-root") -> tuple[str, str, str]:
    """(root and data blocks, the page script, the mount script) for one view."""
    blocks = (f'<div class="{cls}" id="{uid}">{_fallback(data)}</div>\n'
              f'<script type="application/json" id="{uid}-data">{embed_json(data)}</script>')
    mount = (f'(function(){{var r=document.getElementById("{uid}");var d=JSON.parse(document.getElementById('
             f'"{uid}-data").textContent);window.StudyGroup.mount(r,{{data:d}});}})();')
    return blocks, page_script(), mount


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def report_html(explanation_or_data, title: str | None = None) -> str:
    """A whole HTML document that shows the views offline: no server, no network.

    Its Content-Security-Policy allows only its own inline script and style (by hash) and no
    request at all, so the file cannot reach the network even if asked to.
    """
    data = view_data(explanation_or_data)
    uid = f"sg-{uuid.uuid4().hex[:12]}"
    blocks, script, mount = _parts(data, uid)
    css = static_text("page.css")
    text = data.get("text")
    title = title or ("studygroup: " + (text if isinstance(text, str) else "explanation"))
    csp = (f"default-src 'none'; script-src {_sha256(script)} {_sha256(mount)}; style-src {_sha256(css)}; "
           "img-src data: blob:; base-uri 'none'; form-action 'none'")
    return ("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{escape(csp, quote=False)}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{css}</style>\n</head>\n<body class=\"sg-page\">\n"
            f"{blocks}\n<script>{script}</script>\n<script>{mount}</script>\n</body>\n</html>\n")


def write_report(explanation_or_data, path) -> Path:
    """Write report_html(...) to `path` (UTF-8) and return the path.

    explanation_or_data: payloads.report_data(model, text) for every view (model view and the
    decisive heads' grids), or an Explanation / Comparison for the views it holds.
    """
    from studygroup.views.output_file import write_text

    return write_text(path, report_html(explanation_or_data))


def notebook_html(explanation_or_data) -> str:
    """HTML for a notebook cell (`_repr_html_`): the views, inlined, with ids unique to this call."""
    data = view_data(explanation_or_data)
    uid = f"sg-{uuid.uuid4().hex[:12]}"
    blocks, script, mount = _parts(data, uid, "sg-root sg-nb")
    return f"<style>{static_text('page.css')}</style>\n{blocks}\n<script>{script}</script>\n<script>{mount}</script>\n"
