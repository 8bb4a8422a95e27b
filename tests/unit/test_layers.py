"""The folders are the layers: imports point down only, and no modules import each other in a circle.

Every import counts, wherever it stands: at the top, inside a function, under TYPE_CHECKING (a lazy
import does not break a cycle, it hides it).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "studygroup"
#: Bottom to top. A module may import from its own layer and the layers below it.
LAYERS = ["base", "formulas", "gguf", "model", "study", "views", "web", "top"]
BASE = {"studygroup.errors", "studygroup.formats", "studygroup.progress"}
TOP = {"studygroup", "studygroup.cli"}
#: Layers a layer may not import though they are below it: the web app reaches the study layer
#: through views (views/payloads.py), so that what the page shows is gathered in one place.
SKIPPED_BELOW = {"web": {"study"}}
MAX_TOP_LEVEL = 10


def modules() -> dict[str, Path]:
    """{dotted name: file} for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def layer(name: str) -> str:
    if name in BASE:
        return "base"
    if name in TOP:
        return "top"
    return name.split(".")[1]


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports, anywhere in its file."""
    found = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            named = {f"{base}.{a.name}" for a in node.names} & known
            found |= named if len(named) == len(node.names) else named | {base}  # a name, not a module: base
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def test_layers_are_known():
    unknown = {name for name in graph() if layer(name) not in LAYERS}
    assert not unknown, f"modules outside every layer: {sorted(unknown)}"


def test_imports_point_down():
    up = [f"{a} ({layer(a)}) imports {b} ({layer(b)})" for a, targets in graph().items() for b in targets
          if LAYERS.index(layer(b)) > LAYERS.index(layer(a))]
    assert not up, "upward imports:\n" + "\n".join(sorted(up))


def test_web_reaches_study_through_views():
    skipped = [f"{a} imports {b}" for a, targets in graph().items() for b in targets
               if layer(b) in SKIPPED_BELOW.get(layer(a), set())]
    assert not skipped, "imports past views:\n" + "\n".join(sorted(skipped))


def strongly_connected(g: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through imports (Tarjan's algorithm), size > 1."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return groups


def test_no_cycles():
    cycles = strongly_connected(graph())
    assert not cycles, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_cycles_are_found():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(g) == [["a", "b", "c"]]


def test_few_modules_at_the_top():
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= MAX_TOP_LEVEL, f"{len(top)} modules directly in studygroup/: {sorted(top)}"


@pytest.mark.parametrize("source, expected", [
    ("from studygroup.model import run\n", {"studygroup.model.run"}),
    ("from studygroup.model.run import Run\n", {"studygroup.model.run"}),
    ("from studygroup.study import explain, VERSION\n", {"studygroup.study", "studygroup.study.explain"}),
    ("def f():\n    from studygroup.study import explain\n", {"studygroup.study.explain"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import studygroup.views.text\n",
     {"studygroup.views.text"}),
])
def test_imports_are_found_anywhere(tmp_path, source, expected):
    f = tmp_path / "m.py"
    f.write_text(source)
    known = {"studygroup.model", "studygroup.model.run", "studygroup.study", "studygroup.study.explain",
             "studygroup.views.text"}
    assert imports("studygroup.formulas.m", f, known) == expected
