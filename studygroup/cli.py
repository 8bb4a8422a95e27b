"""The command line: parse, call the library, render. No model logic here.

Every error studygroup raises on purpose is printed as one line on stderr with exit status 2.
"""
from __future__ import annotations

import argparse
import sys

DEFAULT_TEXT = "Cash or credit card? I have a lot"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="studygroup", description="The attention layer of a real model, as a study group.")
    sub = parser.add_subparsers(dest="command", required=True)
    explain = sub.add_parser("explain", help="the members of a text and the group's conclusion")
    explain.add_argument("text", nargs="?", default=DEFAULT_TEXT)
    explain.add_argument("--model", default=None, metavar="PATH", help="a llama GGUF file (default: SmolLM2-135M-Instruct)")
    explain.add_argument("--top", type=int, default=10, help="how many next words to show")
    explain.set_defaults(handler=_explain)
    return parser


def _explain(args) -> None:
    from studygroup import render_text
    from studygroup.model import load

    model = load(args.model)
    run = model.run(args.text, record="none")
    print(render_text.members_and_conclusion(run, args.top))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from studygroup.errors import StudyGroupError

    try:
        args.handler(args)
    except StudyGroupError as e:
        print(f"studygroup: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("studygroup: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
