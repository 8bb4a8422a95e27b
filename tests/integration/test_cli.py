"""The command line on a tiny random model: every command, --json, and one-line errors for bad input."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from studygroup.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return str(tiny_model.path)


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_prints_members_conclusion_heads_members_and_story(capsys, tiny):
    code, out, err = cli(capsys, "explain", "the tin", "--model", tiny, "--top", 3)
    assert code == 0 and err == ""
    for title in ("members (4): t | he | ␣t | in", "the group's conclusion", "which heads decided it",
                  "which members decided it", "the story:"):
        assert title in out
    assert "measured one at a time: all 8, each silenced at every position" in out
    assert "silenced one at a time: all 4, each silenced in every head" in out


def test_explain_json(capsys, tiny):
    code, out, _ = cli(capsys, "explain", "the tin", "--model", tiny, "--top", 4, "--measure-heads", 2, "--json")
    data = json.loads(out)
    assert code == 0 and len(data["top"]) == 4 and data["heads_measured"] == 2
    assert sum(h["silence_effect"] is not None for h in data["heads"]) == 2  # the others at the last position only
    assert data["tokens"] == ["t", "he", "␣t", "in"] and data["heads_silenced"].startswith("2 of 8 heads measured exactly")
    assert [m["index"] for m in data["members"]] == [0, 1, 2, 3]


def test_compare_text_and_json(capsys, tiny):
    code, out, _ = cli(capsys, "compare", "the tin", "an ear the tin", "--model", tiny)
    assert code == 0 and "the shift (a → b)" in out and "b, prefix silenced" in out
    code, out, _ = cli(capsys, "compare", "the tin", "an ear the tin", "--model", tiny, "--json")
    data = json.loads(out)
    assert code == 0 and {"a", "b", "shift"} <= set(data) and data["prefix"]["text"] == "an ear "


def test_compare_of_one_text_twice_says_the_runs_are_one_and_tells_no_change(capsys, tiny):
    data = json.loads(cli(capsys, "compare", "the tin", "the tin", "--model", tiny, "--json")[1])
    assert all(s["change"] == 0 for s in data["shift"])  # what the story says: nothing differs
    code, out, _ = cli(capsys, "compare", "the tin", "the tin", "--model", tiny)
    story = out.split("the story:")[1]
    assert code == 0 and "are the same 4 tokens, so the two runs are one" in story
    assert "→" not in story and "stays" not in story and "changes" not in story.replace("context changes", "")


def test_compare_says_which_members_its_table_leaves_out(capsys, tiny):
    argv = ["compare", "the tin", "an ear of tea the tin", "--model", tiny, "--top", 2]
    data = json.loads(cli(capsys, *argv, "--measure-members", 10, "--json")[1])
    T, measured = len(data["b"]["tokens"]), len(data["members"])
    assert T > measured == 10 > 8  # 8 rows shown, 2 measured beside them, the rest not measured
    code, out, _ = cli(capsys, *argv, "--measure-members", 10)
    table = out.split("by the effect of silencing them")[1].split("the story:")[0]
    assert code == 0 and len([l for l in table.splitlines() if l.strip()[:1].isdigit()]) == 8
    assert "… and 2 more members measured, each with a smaller effect: --json gives every number" in table
    assert f"({T - 10} of the {T} members not measured: --measure-members all measures every one)" in table
    code, out, _ = cli(capsys, *argv, "--measure-members", "all")
    assert "not measured" not in out.split("by the effect of silencing them")[1].split("the story:")[0]


@pytest.mark.parametrize("notation", ["paper", "columns"])
def test_head_text_and_json(capsys, tiny, notation):
    code, out, _ = cli(capsys, "head", "the tin", "--layer", 1, "--head", 2, "--notation", notation, "--model", tiny)
    assert code == 0 and f"notation: {notation}" in out and "the same result" in out
    code, out, _ = cli(capsys, "head", "the tin", "--layer", 1, "--head", 2, "--notation", notation,
                       "--model", tiny, "--json", "--top", 2)
    data = json.loads(out)
    assert data["notation"] == notation and len(data["members"][0]["question"]["largest"]) == 2
    assert data["scores"][0][3] is None if notation == "paper" else data["scores"][3][0] is None


def test_head_in_a_silenced_run(capsys, tiny):
    code, out, _ = cli(capsys, "head", "the tin", "--layer", 1, "--head", 2, "--model", tiny, "--json",
                       "--silence-member", 1, "--silence-member", 1, "--silence-head", "0.3")
    data = json.loads(out)
    assert code == 0 and data["silenced_members"] == [1] and data["silenced_heads"] == [[0, 3]]
    T = len(data["tokens"])
    assert all(data["weights"][i][1] == 0 and not data["mask"][i][1] for i in range(T) if i != 1)
    clean = json.loads(cli(capsys, "head", "the tin", "--layer", 1, "--head", 2, "--model", tiny, "--json")[1])
    assert clean["silenced_members"] == [] and clean["weights"] != data["weights"]
    code, out, _ = cli(capsys, "head", "the tin", "--layer", 1, "--head", 2, "--model", tiny, "--silence-member", 1)
    assert code == 0 and "silenced in this run: member 1" in out and "nobody hears its answer" in out


def test_lesson_sections_json_and_html(capsys, tiny, tmp_path):
    code, out, _ = cli(capsys, "lesson", "--section", 6, "--model", tiny)
    assert code == 0 and out.startswith("── 6/8  Softmax of one question's scores")
    assert out.rstrip().endswith("next: --section 7  (The weighted sum of the answers)")
    code, out, _ = cli(capsys, "lesson", "--section", 1, "--model", tiny, "--json")
    assert code == 0 and json.loads(out)["name"] == "members"
    page = tmp_path / "lesson.html"
    code, out, _ = cli(capsys, "lesson", "--model", tiny, "--html", page)
    assert code == 0 and str(page) in out
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    assert '<a href="#s4" rel="prev">' in html and '<a href="#s6" rel="next">' in html  # section 5 goes back and on
    assert html.count('href="#contents"') == 8 and "id='contents'" in html and "“Cash or credit card? I have a lot”" in html


def test_lesson_on_a_text_prints_its_sections(capsys, tiny):
    code, out, _ = cli(capsys, "lesson", "the tin", "--head", "1.2", "--model", tiny)
    assert code == 0 and out.startswith("── 1/8  The study group: its members")
    assert "── 8/8  The conclusion, and how context changes it" in out and "√d_k = √8 = 2.828" in out
    assert max(len(line) for line in out.splitlines()) <= 400 and len(out.splitlines()) <= 100


def test_lesson_on_a_long_text_stays_within_100_lines(capsys, tmp_path):
    from conftest import write_tiny_gguf

    long = write_tiny_gguf(tmp_path / "long.gguf", context=512).path
    code, out, _ = cli(capsys, "lesson", "the tin " * 100, "--head", "0.1", "--model", long)
    assert code == 0 and "members run from “t”" in out and "(“tin the tin the" in out and "…”), it is" in out
    assert max(len(line) for line in out.splitlines()) <= 400 and len(out.splitlines()) <= 100


@pytest.mark.parametrize("argv, message", [
    (["explain", ""], "empty"),
    (["explain", "   "], "only whitespace"),
    (["compare", "the tin", " \n "], "only whitespace"),
    (["head", "\t", "--layer", "0", "--head", "0"], "only whitespace"),
    (["explain", "the tin " * 40], "context"),
    (["head", "the tin", "--layer", "2", "--head", "0"], "layer 2 does not exist"),
    (["head", "the tin", "--layer", "-1", "--head", "0"], "layer -1 does not exist"),
    (["head", "the tin", "--layer", "0", "--head", "4"], "head 4 does not exist"),
    (["head", "the tin", "--layer", "0", "--head", "0", "--notation", "rows"], "unknown notation"),
    (["head", "the tin", "--layer", "x", "--head", "0"], "--layer"),
    (["head", "the tin", "--head", "0"], "--layer"),
    (["head", "the tin", "--layer", "0", "--head", "0", "--silence-member", "7"], "member 7 does not exist"),
    (["head", "the tin", "--layer", "0", "--head", "0", "--silence-member", "-1"], "--silence-member"),
    (["head", "the tin", "--layer", "0", "--head", "0", "--silence-head", "1"], "is not LAYER.HEAD"),
    (["head", "the tin", "--layer", "0", "--head", "0", "--silence-head", "2.0"], "layer 2 does not exist"),
    (["lesson", "--section", "9"], "section 9 does not exist"),
    (["lesson", "--section", "0"], "section 0 does not exist"),
    (["lesson", "the tin", "--section", "9"], "section 9 does not exist"),
    (["lesson", "the tin", "--head", "2.0"], "layer 2 does not exist"),
    (["explain", "the tin", "--top", "0"], "--top"),
    (["explain", "the tin", "--measure-heads", "some"], "--measure-heads"),
    (["explain", "the tin", "--silence-members", "1"],
     "--silence-members is not an option: did you mean --silence-member J (nobody hears member J) or "
     "--measure-members N|all (how many members are measured)?"),
    (["explain", "--silence-heads=1.2"], "did you mean --silence-head L.H (head H of layer L writes nothing) or "
                                         "--measure-heads N|all"),
    (["compare", "the tin", "an ear the tin", "--silence-members", "1"], "--silence-member J"),
    (["head", "the tin", "--layer", "0", "--head", "0", "--silence-members", "1"],
     "--silence-members is not an option: did you mean --silence-member J (nobody hears member J)? "),
    (["explain", "the tin", "--silence-mem", "1"], "unrecognized arguments: --silence-mem"),
    (["explain", "the tin", "--measure-h", "1"], "unrecognized arguments: --measure-h"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
    (["explain", "ab\udcffcd"], "lone surrogate"),  # how Python passes bytes that are not UTF-8
    (["explain", "the tin", "--html", ""], "file name is empty"),
    (["explain", "the tin", "--png", ""], "file name is empty"),
    (["explain", "the tin", "--html", "/proc/no-such-dir/x.html"], "cannot write"),
    (["explain", "the tin", "--svg", "/proc/x.svg"], "cannot write /proc/x.svg"),  # refused even for root
    (["explain", "the tin", "--device", "meta"], "device 'meta' is not supported"),
    (["explain", "the tin", "-x"], "unrecognized arguments: -x (see: studygroup explain --help)"),
    (["head", "the tin", "--layer", "1_0", "--head", "0"], "'1_0' is not a whole number"),
    (["head", "the tin", "--layer", "0", "--head", "0", "--silence-head", "+1.2"], "is not LAYER.HEAD"),
])
def test_bad_input_gets_one_line_and_exit_2(capsys, tiny, argv, message):
    code, out, err = cli(capsys, *argv, *(["--model", tiny] if argv and argv[0] != "frobnicate" else []))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("studygroup: error: ") and message in err, err


def test_unreadable_model_paths(capsys, tmp_path):
    not_gguf = tmp_path / "notes.txt"
    not_gguf.write_text("hello")
    for path, words in ((tmp_path / "missing.gguf", "does not exist"), (not_gguf, "not a GGUF"),
                        (tmp_path, "is a folder"), ("/dev/null", "not a regular file"), ("", "path is empty"),
                        ("~no-such-user-zz/x.gguf", "cannot read the model path"),
                        ("/proc/self/mem", "cannot read the model file /proc/self/mem")):
        code, out, err = cli(capsys, "explain", "the tin", "--model", path)
        assert code == 2 and err.count("\n") == 1 and err.startswith("studygroup: error: ") and words in err, err


def test_output_that_cannot_be_written_is_one_line_and_exit_1(tiny):
    """A full disk under stdout: the result cannot be printed, and the command says so."""
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "studygroup.cli", "explain", "the tin", "--model", tiny],
                           stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr == "studygroup: error: cannot write the output: No space left on device\n"


def test_a_terminal_that_cannot_encode_the_marks_gets_escapes(tiny):
    p = subprocess.run([sys.executable, "-m", "studygroup.cli", "explain", "a tin", "--model", tiny, "--top", "1"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert p.returncode == 0 and p.stderr == "" and "\\u2423t" in p.stdout  # ␣ as \u2423


def test_lesson_pages_stop_at_end_of_input(capsys, tiny, monkeypatch):
    """Ctrl-D at the lesson's "Enter: next section" prompt ends it quietly."""
    def eof(prompt):
        raise EOFError
    monkeypatch.setattr("builtins.input", eof)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, err = cli(capsys, "lesson", "--model", tiny)
    assert code == 0 and err == "" and out.startswith("── 1/8")


def test_unwritable_html_path(capsys, tiny, tmp_path):
    for path in (tmp_path / "no" / "such" / "folder" / "x.html", tmp_path):
        code, out, err = cli(capsys, "lesson", "--model", tiny, "--html", path)
        assert code == 2 and err.count("\n") == 1 and "cannot write" in err, err
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        code, _, err = cli(capsys, "lesson", "--model", tiny, "--html", locked / "x.html")
        assert code == 2 and "permission denied" in err


def test_a_real_process(tiny):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run([sys.executable, "-m", "studygroup.cli", "explain", "the tin", "--model", tiny, "--json"],
                        capture_output=True, text=True, env=env, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["tokens"] == ["t", "he", "␣t", "in"]
    bad = subprocess.run([sys.executable, "-m", "studygroup.cli", "head", "the tin", "--layer", "7", "--head", "0",
                          "--model", tiny], capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and bad.stdout == "" and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == "studygroup: error: layer 7 does not exist: the model has 2 layers (0-1)"


def test_lesson_at_a_terminal_goes_one_section_at_a_time(capsys, tiny, monkeypatch):
    answers = iter(["", "q"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    code, out, _ = cli(capsys, "lesson", "--model", tiny)
    assert code == 0 and "── 1/8" in out and "── 2/8" in out and "── 3/8" not in out


# ---- file outputs: figures (--png/--svg), the HTML report (--html), and options ----------------
def test_explain_writes_png_svg_and_a_report(capsys, tiny, tmp_path):
    png, svg, html = tmp_path / "e.png", tmp_path / "e.svg", tmp_path / "e.html"
    code, out, err = cli(capsys, "explain", "the tin", "--model", tiny, "--png", png, "--svg", svg, "--html", html)
    assert code == 0, err
    assert err.splitlines() == [f"studygroup: wrote {png}", f"studygroup: wrote {svg}", f"studygroup: wrote {html}"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "<svg" in svg.read_text()
    report = html.read_text()
    assert "<script" in report and "he" in report and "http://" not in report.replace("http://www.w3.org", "")


def test_compare_and_head_write_figures(capsys, tiny, tmp_path):
    code, _, err = cli(capsys, "compare", "the tin", "an ear the tin", "--model", tiny, "--png", tmp_path / "c.png")
    assert code == 0, err and (tmp_path / "c.png").stat().st_size > 1000
    code, out, err = cli(capsys, "head", "the tin", "--layer", 0, "--head", 1, "--model", tiny,
                         "--svg", tmp_path / "h.svg", "--json")
    assert code == 0 and err == f"studygroup: wrote {tmp_path / 'h.svg'}\n", err
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


def test_a_reader_that_stops_reading_ends_the_command_quietly(tiny, monkeypatch, capsys):
    import io

    class ClosedPipe(io.StringIO):  # what `studygroup explain ... | head -1` gives once head exits
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            return os.open(os.devnull, os.O_WRONLY)

    from studygroup import cli as cli_module

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert cli_module.main(["explain", "the tin", "--model", str(tiny)]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_a_first_load_writes_the_weights_cache_after_the_answer(capsys, tiny, tmp_path, monkeypatch):
    """The first run prints its explanation before spending ~1.5 s on the cache; the cache is
    there when the command returns, and the next load maps it."""
    from studygroup.model import disk_cache as cache
    from studygroup import cli as cli_module
    from studygroup.model.weights_cache import load_weights

    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    entry = cache.entry_path(cache.file_key(tiny), "weights")
    seen = []
    printed = cli_module._print
    monkeypatch.setattr(cli_module, "_print", lambda text: seen.append(entry.exists()) or printed(text))
    code, out, err = cli(capsys, "explain", "the tin", "--model", tiny)
    assert code == 0 and "the group's conclusion" in out
    assert seen == [False] and entry.exists()
    def no_dequantizing(path):
        raise AssertionError("the second load dequantized the file again")
    monkeypatch.setattr("studygroup.gguf.weights.read_weights", no_dequantizing)
    assert load_weights(tiny)[1]["embed"].shape[0] > 0  # from the entry


def test_version_prints_the_installed_packages_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:  # argparse's --version, as its --help, ends the program
        cli(capsys, "--version")
    out, err = capsys.readouterr()
    assert done.value.code == 0 and out == f"studygroup {version('studygroup')}\n" and err == ""
