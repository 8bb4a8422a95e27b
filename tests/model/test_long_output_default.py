"""Long texts, bounded output: explain on a ~3,000-token text prints under 100 lines of at most
400 characters by default."""
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

