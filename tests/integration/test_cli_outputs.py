"""The command line's file outputs: figures (--png/--svg), the HTML report (--html), and options."""
import json

import pytest

from studygroup.cli import main


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return str(tiny_model.path)


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_writes_png_svg_and_a_report(capsys, tiny, tmp_path):
    png, svg, html = tmp_path / "e.png", tmp_path / "e.svg", tmp_path / "e.html"
    code, out, err = cli(capsys, "explain", "the tin", "--model", tiny, "--png", png, "--svg", svg, "--html", html)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "<svg" in svg.read_text()
    report = html.read_text()
    assert "<script" in report and "he" in report and "http://" not in report.replace("http://www.w3.org", "")


def test_compare_and_head_write_figures(capsys, tiny, tmp_path):
    code, _, err = cli(capsys, "compare", "the tin", "an ear the tin", "--model", tiny, "--png", tmp_path / "c.png")
    assert code == 0, err and (tmp_path / "c.png").stat().st_size > 1000
    code, out, err = cli(capsys, "head", "the tin", "--layer", 0, "--head", 1, "--model", tiny,
                         "--svg", tmp_path / "h.svg", "--json")
    assert code == 0, err
    assert json.loads(out)["notation"] == "paper" and "he" in (tmp_path / "h.svg").read_text()


@pytest.mark.parametrize("argv, message", [
    (["explain", "the tin", "--png", "/nonexistent-folder/x.png"], "cannot write"),
    (["explain", "the tin", "--png", "x.jpg"], "png"),
    (["explain", "the tin", "--html", "/nonexistent-folder/x.html"], "does not exist"),
    (["explain", "the tin", "--device", "nonsense"], "unknown device"),
    (["explain", "the tin", "--dtype", "float16"], "invalid choice"),
])
def test_bad_output_options_get_one_line_before_any_work(capsys, tiny, argv, message):
    code, out, err = cli(capsys, *argv, "--model", tiny)
    assert code == 2 and out == "" and message.lower() in err.lower() and err.count("\n") == 1
