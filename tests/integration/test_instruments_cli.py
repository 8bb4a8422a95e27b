"""`studygroup lens`, `studygroup patch` and `studygroup ablate` on tiny random models: the grids,
--json equal to the library's results on a file of every family read, and one-line errors (exit 2)
for bad input."""
import json

import pytest

import studygroup
from integration.test_every_family import FAMILIES, tiny_file
from studygroup.cli import main
from studygroup.study.ablation import head_effects
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


def test_lens_names_the_member_its_last_columns_follow(capsys, tiny_model):
    """The last two columns follow the last member shown: with --rows ending before the text's end,
    that member, by its position and token, and its own final word; else the last member."""
    model = studygroup.load(tiny_model.path)
    e = lens(model, "the tin", positions=slice(1, 3))
    code, out, _ = cli(capsys, "lens", "the tin", "--model", tiny_model.path, "--rows", "1:3")
    line = next(l for l in out.splitlines() if l.startswith("the last two columns"))
    assert code == 0 and e.positions == [1, 2]
    assert f"of {e.final[-1].token}, the model's own conclusion at member 2 (“{e.tokens[2]}”), the last shown" in line
    code, out, _ = cli(capsys, "lens", "the tin", "--model", tiny_model.path)
    assert "the model's own conclusion at the last member" in out


def test_patch_says_its_cost_first_and_its_json_is_the_librarys(capsys, tiny_model):
    code, out, err = cli(capsys, "patch", "the tin", "the ton", "--model", tiny_model.path, "--json")
    assert code == 0 and err.startswith("patching ") and "layers" in err
    model = studygroup.load(tiny_model.path)
    assert json.loads(out) == json.loads(patch(model, "the tin", "the ton").to_json())
    code, out, _ = cli(capsys, "patch", "the tin", "the ton", "--model", tiny_model.path, "--full")
    assert code == 0 and all(f"{g} (layer ×" in out for g in ("resid_pre", "attn_out", "mlp_out", "heads"))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_three_commands_run_on_every_family_and_print_the_librarys_numbers(capsys, tmp_path, family):
    path = tiny_file(family, tmp_path)[0]
    model = studygroup.load(path, cache=False)
    for argv, result in ((["lens", "the tin"], lens(model, "the tin")),
                         (["lens", "the tin", "--all-positions"], lens(model, "the tin", all_positions=True)),
                         (["patch", "the tin", "the ton"], patch(model, "the tin", "the ton")),
                         (["ablate", "the tin", "--from", "the ton"], head_effects(model, "the tin", resample_from="the ton"))):
        code, out, err = cli(capsys, *argv, "--model", path, "--json")
        assert code == 0 and json.loads(out) == json.loads(result.to_json()), (family, argv, err)
        code, out, _ = cli(capsys, *argv, "--model", path)
        assert code == 0 and "the story:" in out, (family, argv)


def test_the_same_text_twice_is_said_and_no_cell_is_nan(capsys, tiny_model):
    code, out, _ = cli(capsys, "patch", "the tin", "the tin", "--model", tiny_model.path, "--json")
    p = json.loads(out)
    assert code == 0 and p["clean_diff"] == p["corrupted_diff"]
    assert all(v is None for g in p["grids"].values() for row in g["normalised"] for v in row)
    assert any("same difference" in s for s in p["story"])
    code, out, _ = cli(capsys, "patch", "the tin", "the tin", "--model", tiny_model.path)
    assert code == 0 and "same difference" in out and "--json: the raw values too" in out
    assert "raw values are given" not in out  # the text shows the normalised grids only


@pytest.mark.parametrize("argv, words", [
    (["patch", "the tin", "the tin can"], "same number of tokens"),
    (["patch", "", "the tin"], "empty"),
    (["patch", "the tin", "the ton", "--answer", "tin can"], "tokens ("),
    (["patch", "the tin", "the ton", "--wrong", ""], "is 0 tokens (nothing)"),
    (["patch", "the tin", "the ton", "--answer", "t", "--wrong", "t"], "the answer and the wrong word are both t:"),
    (["lens", "the tin", "--rows", "30:40"], "leaves the text"),
    (["lens", "the tin", "--rows", "-40:-30"], "leaves the text"),
    (["lens", "the tin", "--rows", "2:9"], "rows 2:9 leaves the text: the text's 4 members are 0-3"),  # as head's --rows, no clipping
    (["lens", "the tin", "--rows", "3:1"], "give --rows A:B with its start before its end"),
    (["lens", "the tin", "--rows", "0:2", "--all-positions"], "not allowed with argument"),
    (["lens", "   "], "only whitespace"),
    (["lens", ""], "the text is empty"),
    (["ablate", ""], "the text is empty"),
    (["ablate", "the tin", "--head", "9.0"], "layer 9 does not exist"),
    (["ablate", "the tin", "--head", "0.9"], "head 9 does not exist"),
    (["ablate", "the tin", "--from", "the tin can"], "the resample text is 8 members and this text 4"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tiny_model, argv, words):
    code, out, err = cli(capsys, *argv, "--model", tiny_model.path)
    assert code == 2 and out == "" and words in err and err.count("\n") == 1, err
