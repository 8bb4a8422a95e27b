"""`studygroup lens` and `studygroup patch` on a tiny random model: the grids, --json equal to the
library's results, and one-line errors (exit 2) for bad input."""
import json

import pytest

import studygroup
from studygroup.cli import main
from studygroup.study.lens import lens
from studygroup.study.patching import patch


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_lens_prints_a_row_per_layer_and_its_json_is_the_librarys(capsys, tiny_model):
    code, out, err = cli(capsys, "lens", "the tin", "--model", tiny_model.path)
    model = studygroup.load(tiny_model.path)
    e = lens(model, "the tin")
    assert code == 0 and err == ""
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == model.config.n_layers and "the story:" in out
    code, out, _ = cli(capsys, "lens", "the tin", "--model", tiny_model.path, "--json", "--top", 2)
    assert code == 0 and json.loads(out) == json.loads(lens(model, "the tin", top=2).to_json())
    assert len(e.layers) == model.config.n_layers


def test_patch_says_its_cost_first_and_its_json_is_the_librarys(capsys, tiny_model):
    code, out, err = cli(capsys, "patch", "the tin", "the ton", "--model", tiny_model.path, "--json")
    assert code == 0 and err.startswith("patching ") and "layers" in err
    model = studygroup.load(tiny_model.path)
    assert json.loads(out) == json.loads(patch(model, "the tin", "the ton").to_json())
    code, out, _ = cli(capsys, "patch", "the tin", "the ton", "--model", tiny_model.path, "--full")
    assert code == 0 and all(f"{g} (layer ×" in out for g in ("resid_pre", "attn_out", "mlp_out", "heads"))


@pytest.mark.parametrize("argv, words", [
    (["patch", "the tin", "the tin can"], "same number of tokens"),
    (["patch", "", "the tin"], "empty"),
    (["patch", "the tin", "the ton", "--answer", "tin can"], "tokens ("),
    (["lens", "the tin", "--rows", "30:40"], "hold no member"),
    (["lens", "   "], "only whitespace"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tiny_model, argv, words):
    code, out, err = cli(capsys, *argv, "--model", tiny_model.path)
    assert code == 2 and out == "" and words in err and err.count("\n") == 1, err
