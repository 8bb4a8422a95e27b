"""`studygroup generate` on the tiny random model: streamed text, --json, silencing, one-line errors."""
import json

import pytest

import studygroup

from integration.test_cli import cli, tiny  # noqa: F401 (tiny: a fixture)


def test_streamed_text_is_the_prompt_and_the_greedy_words(capsys, tiny, model):
    code, out, err = cli(capsys, "generate", "the tin", "-n", 6, "--model", tiny, "--ignore-eos")
    expected = model.generate("the tin", 6, ignore_eos=True)
    assert code == 0 and err == ""
    assert out.startswith("the tin" + expected.text) and "(6 words)" in out


def test_json_alone_equals_model_generate(capsys, tiny, model):
    argv = ("generate", "the tin", "-n", 5, "--model", tiny, "--temperature", 0.9, "--top-k", 7, "--top-p", 0.8,
            "--seed", 11, "--candidates", 3, "--ignore-eos", "--json")
    code, out, _ = cli(capsys, *argv)
    data = json.loads(out)
    g = model.generate("the tin", 5, temperature=0.9, top_k=7, top_p=0.8, seed=11, candidates=3, ignore_eos=True)
    sampling = data.pop("sampling")
    assert code == 0 and data == json.loads(json.dumps(g.to_json()))
    assert all(len(w["top"]) == 3 for w in data["words"])
    assert sampling == {"temperature": 0.9, "top_k": 7, "top_p": 0.8, "seed": 11, "ignore_eos": True}
    again = model.generate("the tin", 5, candidates=3, **sampling)  # what it records reruns the same words
    assert [w["id"] for w in data["words"]] == again.ids


def test_json_records_the_defaults_it_sampled_with(capsys, tiny):
    data = json.loads(cli(capsys, "generate", "the tin", "-n", 2, "--model", tiny, "--json")[1])
    assert data["sampling"] == {"temperature": 0.0, "top_k": None, "top_p": 1.0, "seed": None, "ignore_eos": False}


def test_silenced_continuation_is_compared(capsys, tiny, model):
    code, out, _ = cli(capsys, "generate", "the tin", "-n", 6, "--model", tiny, "--ignore-eos",
                       "--silence-head", "0.1", "--silence-member", 1)
    other = model.generate("the tin", 6, ignore_eos=True, silence_members=[1], silence_heads=[(0, 1)])
    assert code == 0 and "Without member 1, head 0.1, the group continues:" in out and repr(other.text) in out


@pytest.mark.parametrize("bad", [["-n", "0"], ["-n", "-2"], ["-n", "x"], ["-n", "100000"], ["--temperature", "-0.5"],
                                 ["--temperature", "nan"], ["--top-p", "0"], ["--top-p", "1.01"], ["--top-k", "0"],
                                 ["--seed", "-1"], ["--candidates", "0"], ["--silence-member", "50"],
                                 ["--silence-head", "1"]])
def test_bad_input_is_one_line_exit_2(capsys, tiny, bad):
    code, out, err = cli(capsys, "generate", "the tin", "--model", tiny, *bad)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("studygroup: error:")


def test_a_prompt_past_the_context_is_counted_in_words_a_learner_reads(capsys, tiny):
    one = next(c for c in "etaoinshr" if len(studygroup.load(tiny).tokenize(c)) == 1)  # a one-token prompt
    code, _, err = cli(capsys, "generate", one, "--model", tiny, "-n", "100000")
    assert code == 2 and "the prompt (1 token) and 100000 words exceed the model's context" in err, err


@pytest.mark.parametrize("bad, words", [
    (["--temperature", "5e-324"], "the temperature must be 0 (greedy) or from 1e-06 to 1e+06, not 5e-324"),
    (["--temperature", "1e-320"], "from 1e-06 to 1e+06, not 1e-320"),
    (["--seed", "18446744073709551616"], "the seed must be a whole number from 0 to 18446744073709551615"),
    (["--seed", str(10**30)], "from 0 to 18446744073709551615")])
@pytest.mark.parametrize("command", [["generate", "the tin", "-n", "3"], ["head", "the tin", "--layer", "0", "--head", "0",
                                                                         "--generate", "2"]])
def test_sampling_outside_its_range_is_one_line_naming_the_range(capsys, tiny, command, bad, words):
    """The fault sweep's settings that reached torch (a traceback): the library's one rule, one line."""
    code, out, err = cli(capsys, *command, "--model", tiny, *bad)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err


#: A child started by a process that ignores SIGINT inherits that (something earlier in the test
#: session may set it): Ctrl+C means KeyboardInterrupt again, as at a terminal.
CTRL_C_AS_AT_A_TERMINAL = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def interrupted_generation(tiny_model, slow_step: str):
    """`generate` of 60 words in a child whose each word's step is `slow_step` (Python defining
    slow(self, i) from `step`, the real one), sent SIGINT once words stream: (returncode, first bytes, rest
    of stdout, stderr)."""
    import os
    import signal
    import subprocess
    import sys

    code = (CTRL_C_AS_AT_A_TERMINAL + "import time, studygroup.model.generate as g\n"
            "step = g._Talk.step\n" + slow_step + "g._Talk.step = slow\n"
            "from studygroup.cli import main\nraise SystemExit(main())\n")
    argv = [sys.executable, "-c", code, "generate", "the tin", "-n", "60", "--ignore-eos", "--model", str(tiny_model.path)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    first = p.stdout.read(len("the tin") + 1)  # the prompt and the first word's first byte: words are streaming
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    return p.returncode, first, out, err


def test_a_ctrl_c_python_ignores_in_a_finaliser_still_stops_generation(tiny_model):
    """SIGINT while a finaliser runs: Python prints that KeyboardInterrupt and drops it; the words
    still stop at the next one and the exit is 130 (under load a Ctrl+C could land in one)."""
    code, first, out, err = interrupted_generation(
        tiny_model, "class Slow:\n    def __del__(self): time.sleep(0.3)\n"
                    "def slow(self, i):\n    Slow(); return step(self, i)\n")
    assert code == 130 and first.startswith(b"the tin"), err.decode()[-500:]
    assert err.decode().strip().splitlines()[-1] == "studygroup: interrupted"
    assert "words)" not in (first + out).decode(errors="replace")  # stopped before the end


def test_ctrl_c_keeps_the_words_so_far_and_exits_130(tiny_model):
    """SIGINT while words stream: what was printed stays, one line on stderr, exit 130."""
    code, first, out, err = interrupted_generation(
        tiny_model, "def slow(self, i):\n    time.sleep(0.3); return step(self, i)\n")
    assert code == 130 and first.startswith(b"the tin")
    assert err.decode().strip().splitlines() == ["studygroup: interrupted"]
    shown = (first + out).decode(errors="replace")
    assert len(shown) > len("the tin") and "words)" not in shown  # words kept on screen, stopped before the end
