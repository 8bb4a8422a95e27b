"""Long texts, bounded output: explain on a ~3,000-token text prints under 100 lines of at most
400 characters by default (every head and member is in --json), and the sink/roles of its heads
come from the last 512 questions."""
import json

from studygroup.cli import main

SENTENCE = "Cash or credit card? I have a lot of questions for the study group, and each member answers. "


def test_a_3000_token_explain_prints_under_100_lines(model, capsys):
    text = SENTENCE * 150
    assert 2800 <= len(model.ids(text)) <= 3400
    code = main(["explain", text])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert code == 0 and 20 < len(lines) < 100, len(lines)
    assert max(len(line) for line in lines) <= 400
    assert "the story:" in out and "which heads decided it" in out


def test_json_keeps_every_member_past_the_bound(model, capsys):
    text = SENTENCE * 150
    code = main(["explain", text, "--json", "--measure-heads", "2", "--measure-members", "2"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and len(d["members"]) == len(model.ids(text)) and len(d["heads"]) == 2
    assert all(h["roles"] is None and 0 in h["sinks"] and h["sink_weight"] is not None for h in d["heads"])
