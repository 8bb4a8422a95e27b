"""The page's header names the model as the CLI does: name · quantization · file size."""
from __future__ import annotations

import os

from studygroup.gguf.config import size_text

from .test_page import wait_idle


def test_the_header_names_the_model_with_its_quantization_and_size(page, server_url, markup_model):
    page.goto(server_url)
    wait_idle(page)
    label = f"tiny-random-llama · F32 · {size_text(os.path.getsize(markup_model.path))}"
    header = page.locator(".sg-model").inner_text()
    assert header.startswith(label + ": 2 layers × 4 heads, 2 key/value heads"), header
    assert page.watch.errors == [], page.watch.errors
