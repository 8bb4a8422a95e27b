"""Browser fixtures: Debian's chromium driven by Playwright, and a real `studygroup serve` on loopback.

The browser tests FAIL (never skip) when chromium is missing: `make test` installs it.
The server runs the tiny random model, with tokens that look like markup in its vocabulary, in a
subprocess started exactly as a user would start it (`python -m studygroup.web.serve --port 0`).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import write_tiny_gguf

CHROMIUM = os.environ.get("STUDYGROUP_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
#: Whole tokens in the tiny model's vocabulary, so that one member is exactly this markup.
MARKUP_TOKENS = ["<img src=x onerror=alert(1)>", "</script>", "<s>", "{{7*7}}"]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """artifacts/screenshots/ in the repository (git-ignored; CI keeps it as an artefact)."""
    folder = REPO / "artifacts" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"chromium not found at {CHROMIUM}: `make test` installs it (apt-get install chromium), "
                    "or set STUDYGROUP_CHROMIUM to a chromium of yours", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def markup_model(tmp_path_factory):
    """The tiny random model with MARKUP_TOKENS as whole tokens."""
    return write_tiny_gguf(tmp_path_factory.mktemp("markup") / "markup.gguf", user_tokens=MARKUP_TOKENS)


@pytest.fixture(scope="session")
def server_url(markup_model):
    """A real server in a subprocess on a free loopback port; its printed URL."""
    yield from _serve(markup_model.path)


@pytest.fixture(scope="session")
def long_server_url(tmp_path_factory):
    """A server of a tiny model with a context of 600 that takes texts of up to 600 tokens."""
    path = write_tiny_gguf(tmp_path_factory.mktemp("long") / "long.gguf", context=600).path
    yield from _serve(path, "--max-tokens", "600")


def _serve(model_path, *extra):
    cmd = [sys.executable, "-m", "studygroup.web.serve", "--model", str(model_path), "--port", "0", "--no-warm", *extra]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
    try:
        deadline, seen = time.time() + 120, []
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                pytest.fail("studygroup serve exited before printing its URL:\n" + "".join(seen))
            seen.append(line)
            if " at http://127.0.0.1:" in line:
                yield line.split(" at ", 1)[1].split()[0]
                break
        else:
            pytest.fail("studygroup serve printed no URL within 120 s:\n" + "".join(seen))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


class Watch:
    """Every request a page makes, every dialog it opens, every script error."""

    def __init__(self, page):
        self.requests, self.dialogs, self.errors = [], [], []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: self.errors.append(str(e)))


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    p = context.new_page()
    p.watch = Watch(p)
    yield p
    context.close()


#: A thumbnail of the model view as a person sees it: the pixels of the model view's canvas under the
#: thumbnail's button b, {side, data}: side × side device pixels, RGBA, row by row.
THUMB_PIXELS = """(b) => {
  const c = b.closest('.sg-mv-grid').querySelector('canvas'), cr = c.getBoundingClientRect(), br = b.getBoundingClientRect();
  const r = c.width / cr.width, side = Math.round(br.width * r);
  const data = c.getContext('2d').getImageData(Math.round((br.left - cr.left) * r), Math.round((br.top - cr.top) * r), side, side).data;
  return { side, data };
}"""
