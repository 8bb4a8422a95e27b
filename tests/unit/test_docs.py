"""The documents say what the tree holds: docs/architecture.md names every module and draws the
imports as they stand, every bench result is cited, and no file names a path that does not exist."""
from __future__ import annotations

import os
import re
from collections import defaultdict
from fnmatch import fnmatch
from pathlib import Path

import pytest

from unit.test_layers import LAYERS, PACKAGE, graph, layer, modules

REPO = PACKAGE.parent
ARCHITECTURE = REPO / "docs" / "architecture.md"
RESULTS = REPO / "bench" / "results"
#: The files searched for paths they name, and the folders left out (not ours, or records kept as made).
WRITTEN_IN = ("*.md", "*.py", "*.js", "*.toml", "Makefile")
SKIPPED = {".venv", ".bench", ".git", "artifacts", "results", "node_modules", "__pycache__"}
PATH = re.compile(r"\b(?:docs|bench|tests|studygroup)/[\w./-]+\.(?:py|md|js|css|html|json|txt|sh|c|png|svg|npy)\b")


def table_rows(doc: str) -> dict[str, str]:
    """{layer: its row's text} from the table "| **study/** | `explain`: … · `lens`: … |"."""
    rows = {}
    for line in doc.splitlines():
        m = re.match(r"\| (?:\*\*)?([a-z]+)/?(?:\*\*)? \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def named(row: str) -> set[str]:
    """The names an entry "`a`, `b`: what they are" starts with, over every entry of a row."""
    out = set()
    for entry in row.split(" · "):
        lead = entry.split(":", 1)[0]
        out |= set(re.findall(r"`([\w/]+)`", lead))
    return out


def module_entry(name: str) -> tuple[str, str]:
    """studygroup.study.survey.corpus -> ("study", "survey/corpus"); studygroup.cli -> ("top", "cli")."""
    parts = name.split(".")[1:]
    if layer(name) in ("base", "top"):
        return layer(name), parts[0] if parts else "__init__"
    return parts[0], "/".join(parts[1:])


def documented_modules() -> list[str]:
    """Every module but a layer's (or a sub-package's) __init__: the folder is what the table names."""
    return [name for name, path in modules().items() if path.name != "__init__.py" or name == "studygroup"]


def test_architecture_names_every_module():
    rows = {k: named(v) for k, v in table_rows(ARCHITECTURE.read_text()).items()}
    missing = []
    for name in sorted(documented_modules()):
        row, entry = module_entry(name)
        if entry not in rows.get(row, set()):
            missing.append(f"{name} (as `{entry}` in the {row} row)")
    assert not missing, "modules docs/architecture.md does not name:\n" + "\n".join(missing)


def test_architecture_names_no_module_that_is_missing():
    absent = []
    for row, names in ((k, named(v)) for k, v in table_rows(ARCHITECTURE.read_text()).items()):
        folder = PACKAGE if row in ("base", "top") else PACKAGE / row
        absent += [f"{row}: {n}" for n in names if not ((folder / f"{n}.py").is_file() or (folder / n).is_dir())]
    assert not absent, "docs/architecture.md names modules that do not exist:\n" + "\n".join(absent)


def drawn_arrows(doc: str) -> dict[str, set[str]]:
    """{layer: the layers its line of the drawing says it imports from} ("study/ (…)  ──▶  model/ · base")."""
    drawn = {}
    for line in doc.splitlines():
        m = re.match(r"^([a-z]+)/? .*──▶\s+(.*)$", line)
        if m:
            drawn[m.group(1)] = {t.strip().rstrip("/") for t in m.group(2).split(" · ")} - {"(nothing of the package)"}
    return drawn


def imported_layers() -> dict[str, set[str]]:
    out = defaultdict(set)
    for a, targets in graph().items():
        out[layer(a)] |= {layer(b) for b in targets if layer(b) != layer(a)}
    return out


def test_architecture_draws_the_imports_as_they_stand():
    drawn, actual = drawn_arrows(ARCHITECTURE.read_text()), imported_layers()
    assert set(drawn) == set(LAYERS)
    wrong = [f"{a}: drawn {sorted(drawn[a])}, imports {sorted(actual[a])}" for a in LAYERS if drawn[a] != actual[a]]
    assert not wrong, "docs/architecture.md's drawing differs from the imports:\n" + "\n".join(wrong)


def test_the_drawing_is_read():
    doc = "study/ (the questions)   ──▶  model/ · base\nbase   errors.py   ──▶  (nothing of the package)\n"
    assert drawn_arrows(doc) == {"study": {"model", "base"}, "base": set()}
    assert named("`weights_cache`, `disk_cache`: the cache (`load`) · `run`: a run") == {"weights_cache", "disk_cache", "run"}


def cited(name: str, text: str) -> bool:
    """A result file is cited by its name, or, beside its Markdown, as "NAME.md` / `.json"."""
    stem = name.rsplit(".", 1)[0]
    return name in text or f"{stem}.md` / `.json" in text


def test_every_bench_result_is_cited():
    text = (REPO / "bench" / "README.md").read_text() + (REPO / "docs" / "performance.md").read_text()
    uncited = [p.name for p in sorted(RESULTS.iterdir()) if not cited(p.name, text)]
    assert not uncited, "bench results cited neither in bench/README.md nor docs/performance.md:\n" + "\n".join(uncited)


def written_files() -> list[Path]:
    """The repository's own text files (not .venv, not the kept results, not what tests write)."""
    out = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIPPED]
        out += [Path(folder, f) for f in files if any(fnmatch(f, pattern) for pattern in WRITTEN_IN)]
    return sorted(out)


def test_no_file_names_a_path_that_does_not_exist():
    missing = set()
    for f in written_files():
        for path in PATH.findall(f.read_text(errors="replace")):
            placeholder = Path(path).stem.isupper()  # FILE.json, NAME.json: a name for the reader to choose
            if not placeholder and not (REPO / path).exists():
                missing.add(f"{f.relative_to(REPO)}: {path}")
    assert not missing, "paths that do not exist:\n" + "\n".join(sorted(missing))


@pytest.mark.parametrize("text, expected", [
    ("see docs/survey.md and bench/results/NAME.json", ["docs/survey.md", "bench/results/NAME.json"]),
    ("`studygroup/views/static/map.js`'s TILE", ["studygroup/views/static/map.js"]),
])
def test_paths_are_found(text, expected):
    assert PATH.findall(text) == expected

