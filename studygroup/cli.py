"""The command line: parse, call the library, render. No model logic here.

Every error studygroup raises on purpose, and every bad argument, is printed as one line on
stderr with exit status 2.

    studygroup explain [TEXT] [--top K] [--silence-heads N|all] [--silence-members N|all]
    studygroup compare TEXT_A TEXT_B
    studygroup head [TEXT] --layer L --head H [--notation paper|columns] [--silence-member J] [--silence-head L.H]
    studygroup lesson [--section N] [--html FILE]   (at a terminal: one section at a time)

Every command takes --json (print the result as JSON instead), --top K and --model PATH.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_TEXT = "Cash or credit card? I have a lot"


class ArgumentError(Exception):
    """A bad command-line argument (argparse's message, kept to one line)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the usage too: keep it to one line
        raise ArgumentError(f"{message} (see: {self.prog} --help)")


def _whole(least: int):
    def parse(s: str) -> int:
        try:
            n = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r} is not a whole number") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"{n} is too small: the least is {least}")
        return n
    return parse


def _count_or_all(s: str):
    return "all" if s == "all" else _whole(0)(s)


def _layer_head(s: str) -> tuple[int, int]:
    """"24.6" (layer 24, head 6) -> (24, 6)."""
    layer, _, head = s.partition(".")
    try:
        return _whole(0)(layer), _whole(0)(head)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{s!r} is not LAYER.HEAD, e.g. 24.6") from None


def _common(p: argparse.ArgumentParser, top: int, top_help: str) -> None:
    p.add_argument("--model", default=None, metavar="PATH", help="a llama GGUF file (default: SmolLM2-135M-Instruct)")
    p.add_argument("--top", type=_whole(1), default=top, metavar="K", help=top_help)
    p.add_argument("--json", action="store_true", help="print the result as JSON (see docs/json.md)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda, where available")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="float32 (exact, default) or bfloat16 (fast mode, where the CPU multiplies it natively)")


def _figures(p: argparse.ArgumentParser) -> None:
    p.add_argument("--png", default=None, metavar="FILE", help="also save the figure as PNG (slides)")
    p.add_argument("--svg", default=None, metavar="FILE", help="also save the figure as SVG (papers; text stays text)")


def _silencing(p: argparse.ArgumentParser) -> None:
    p.add_argument("--silence-heads", type=_count_or_all, default=16, metavar="N|all",
                   help="how many candidate heads to silence exactly (default 16; all: every head, slower)")
    p.add_argument("--silence-members", type=_count_or_all, default=24, metavar="N|all",
                   help="silence every member up to N tokens, else the N with the largest direct shares (default 24)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="studygroup", description="The attention layer of a real model, as a study group.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("explain", help="the members of a text, the group's conclusion, and who decided it")
    p.add_argument("text", nargs="?", default=DEFAULT_TEXT)
    _common(p, 10, "how many next words to list (default 10)")
    _silencing(p)
    _figures(p)
    p.add_argument("--html", default=None, metavar="FILE", help="also write a self-contained HTML report")
    p.set_defaults(handler=_explain)
    p = sub.add_parser("compare", help="what a longer context does to the conclusion, and who accounts for it")
    p.add_argument("text_a")
    p.add_argument("text_b")
    _common(p, 10, "how many next words of each text to list (default 10)")
    _silencing(p)
    _figures(p)
    p.set_defaults(handler=_compare)
    p = sub.add_parser("head", help="one head as a full study group")
    p.add_argument("text", nargs="?", default=DEFAULT_TEXT)
    p.add_argument("--layer", type=int, required=True)
    p.add_argument("--head", type=int, required=True)
    p.add_argument("--notation", default="paper", help="paper (rows are members) or columns (3Blue1Brown)")
    p.add_argument("--silence-member", type=_whole(0), action="append", default=[], metavar="J",
                   help="the head in a run where nobody hears member J (repeatable)")
    p.add_argument("--silence-head", type=_layer_head, action="append", default=[], metavar="L.H",
                   help="the head in a run where head H of layer L writes nothing (repeatable)")
    _common(p, 4, "how many of each vector's largest entries to show (default 4)")
    _figures(p)
    p.set_defaults(handler=_head)
    p = sub.add_parser("lesson", help="the article's walkthrough with the real model's numbers")
    p.add_argument("--section", type=int, default=None, metavar="N", help="show section N only")
    p.add_argument("--html", default=None, metavar="FILE", help="write the lesson as a self-contained HTML page")
    _common(p, 8, "how many next words the conclusion lists (default 8)")
    p.set_defaults(handler=_lesson)
    from studygroup import serve  # light: the web app is imported only when `serve` runs

    serve.add_parser(sub)
    return parser


def _load(args):
    from studygroup.model import load

    return load(args.model, device=args.device, dtype=args.dtype)


def _check_figures(args) -> None:
    """Refuse unwritable --png/--svg/--html paths before the work starts."""
    if getattr(args, "png", None) or getattr(args, "svg", None):
        from studygroup import figures

        for path, kind in ((args.png, "png"), (args.svg, "svg")):
            if path:
                figures.check_path(path, kind)
    if getattr(args, "html", None):
        _check_writable(args.html)


def _save_figures(args, make_figure) -> None:
    if args.png or args.svg:
        from studygroup import figures

        fig = make_figure(figures)
        for path in (args.png, args.svg):
            if path:
                figures.save(fig, path)


def _explain(args) -> str:
    from studygroup import render_text
    from studygroup.study import explain

    _check_figures(args)
    model = _load(args)
    e = explain(model, args.text, top=args.top, silence_heads=args.silence_heads,
                silence_members=args.silence_members)
    _save_figures(args, lambda figures: figures.explain_figure(e.to_dict()))
    if args.html is not None:
        from studygroup import page_data, report

        report.write_report(page_data.report_data(model, args.text, top=args.top, explained=e), args.html)
    return e.to_json(indent=2) if args.json else render_text.explanation(e)


def _compare(args) -> str:
    from studygroup import render_text
    from studygroup.study_compare import compare

    _check_figures(args)
    c = compare(_load(args), args.text_a, args.text_b, top=args.top, silence_heads=args.silence_heads,
                silence_members=args.silence_members)
    _save_figures(args, lambda figures: figures.compare_figure(c.to_dict()))
    return c.to_json(indent=2) if args.json else render_text.comparison(c)


def _head(args) -> str:
    from studygroup import render_text
    from studygroup.study_head import check_notation, head_view

    check_notation(args.notation)
    _check_figures(args)
    v = head_view(_load(args), args.text, args.layer, args.head, args.notation, largest=args.top,
                  silence_members=args.silence_member, silence_heads=args.silence_head)
    _save_figures(args, lambda figures: figures.head_view_figure(v.to_dict()))
    return v.to_json(indent=2) if args.json else render_text.head_view(v)


def _lesson(args) -> str:
    from studygroup import render_html, render_text
    from studygroup.lesson import check_section, lesson

    if args.section is not None:
        check_section(args.section)
    if args.html is not None:
        _check_writable(args.html)
    l = lesson(_load(args), top=args.top)
    if args.html is not None:
        _write(args.html, render_html.lesson_html(l))
        return f"studygroup: wrote the lesson to {args.html}"
    if args.json:
        return (l.section(args.section) if args.section else l).to_json(indent=2)
    if args.section is None and sys.stdin.isatty() and sys.stdout.isatty():
        return _page([render_text.lesson(l, n) for n in range(1, len(l.sections) + 1)])
    return render_text.lesson(l, args.section)


def _page(pages: list[str]) -> str:
    """At a terminal: one section at a time, Enter for the next, q to stop. Returns the last."""
    for page in pages[:-1]:
        print(page)
        if input("── Enter: next section, q: quit ── ").strip().lower().startswith("q"):
            return ""
    return pages[-1]


def _check_writable(path: str) -> None:
    """InputError now, before the work, if `path` cannot be written."""
    from studygroup.errors import InputError

    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise InputError(f"cannot write {path}: it is a folder; give a file name such as lesson.html")
    if not folder.is_dir():
        raise InputError(f"cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError(f"cannot write {path}: permission denied")


def _write(path: str, content: str) -> None:
    from studygroup.errors import InputError

    try:
        Path(path).write_text(content, encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None


def main(argv: list[str] | None = None) -> int:
    from studygroup import threads
    from studygroup.errors import StudyGroupError

    threads.set_wait_policy()  # before torch is imported (see studygroup.threads)

    try:
        args = build_parser().parse_args(argv)
        print(args.handler(args))
    except (StudyGroupError, ArgumentError) as e:
        print("studygroup: error: " + " ".join(str(e).split()), file=sys.stderr)  # one line
        return 2
    except KeyboardInterrupt:
        print("studygroup: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader stopped reading (`studygroup explain ... | head`): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so no later flush fails too
    return 0


def run() -> None:
    """The console script: main(), then exit at once. Python's orderly teardown of torch's
    modules takes ~0.5 s after the work is done; every file written is closed by then."""
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away after the last write: nothing to say
        pass
    os._exit(code)


if __name__ == "__main__":
    run()
