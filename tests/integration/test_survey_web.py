"""GET /api/survey and `serve --survey DIR`: each head's role over a survey, for the page's marks.

The expected marks are read here from summary.parquet with pyarrow (each head's role of highest
mean among the six roles of `roles`), not from the library's Survey; a survey of another model is
refused in one line (the API: 4xx with a JSON message; the CLI: exit 2).
"""
from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

import studygroup
from conftest import write_tiny_gguf
from studygroup.cli import main
from studygroup.study.roles import ROLES
from studygroup.study.survey.survey import load_survey, survey
from studygroup.web.app import create_app


@pytest.fixture(scope="module")
def surveyed(tiny_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("web") / "s"
    survey(out, model=str(tiny_model.path), corpus="probe", n=6, tokens=16, shard_size=3, workers=1)
    return out


def expected_marks(folder: Path) -> dict:
    """{(layer, head): row of summary.parquet} of each head's role of highest mean (ROLES' order on a tie)."""
    best = {}
    for r in pq.read_table(folder / "summary.parquet").to_pylist():
        if r["role"] not in ROLES or math.isnan(r["mean"]):
            continue
        k, now = (r["layer"], r["head"]), best.get((r["layer"], r["head"]))
        if now is None or r["mean"] > now["mean"] or (r["mean"] == now["mean"] and ROLES.index(r["role"]) < ROLES.index(now["role"])):
            best[k] = r
    return best


def test_the_survey_endpoint_gives_each_heads_role_with_its_interval(tiny_model, surveyed):
    client = TestClient(create_app(studygroup.load(str(tiny_model.path)), survey=load_survey(surveyed)))
    r = client.get("/api/survey")
    assert r.status_code == 200, r.text
    d = r.json()
    expected = expected_marks(surveyed)
    assert len(d["heads"]) == len(expected) == 2 * 4
    for h in d["heads"]:
        e = expected[h["layer"], h["head"]]
        assert (h["role"], h["mean"], h["low"], h["high"], h["n"], h["above"]) == (
            e["role"], e["mean"], e["low"], e["high"], e["n"], e["above"])
        assert e["low"] <= e["mean"] <= e["high"] and h["n"] == 6
        assert f"{e['role']} {e['mean']:.4g} [{e['low']:.4g}, {e['high']:.4g}]" in h["said"]
        assert f"on {e['above']} of 6" in h["said"]
    assert d["sequences"] == 6 and any("induction head on" in s for s in d["story"])


def test_a_survey_of_another_model_is_refused_in_one_line(tiny_model, surveyed, tmp_path):
    other = write_tiny_gguf(tmp_path / "other.gguf", seed=1)
    client = TestClient(create_app(studygroup.load(str(other.path)), survey=load_survey(surveyed)))
    r = client.get("/api/survey")
    assert r.status_code == 400 and list(r.json()) == ["error"]
    said = r.json()["error"]
    assert "\n" not in said and "surveyed tiny.gguf" in said and "not other.gguf" in said


def test_a_server_without_a_survey_answers_404_with_a_message(tiny_model):
    r = TestClient(create_app(studygroup.load(str(tiny_model.path)))).get("/api/survey")
    assert r.status_code == 404 and "serve --survey DIR" in r.json()["error"]


@pytest.mark.parametrize("case, says", [("nowhere", "holds no survey"), ("other model", "not other.gguf")])
def test_serve_refuses_a_bad_survey_in_one_line(tiny_model, surveyed, tmp_path, capsys, case, says):
    other = write_tiny_gguf(tmp_path / "other.gguf", seed=1)
    folder, model = (tmp_path / "nowhere", tiny_model.path) if case == "nowhere" else (surveyed, other.path)
    code = main(["serve", "--port", "0", "--no-warm", "--model", str(model), "--survey", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("studygroup: error: ") and says in err, err
