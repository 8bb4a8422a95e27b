"""The command line: parse, call the library, render. No model logic here.

Every error studygroup raises on purpose, and every bad argument, is printed as one line on
stderr with exit status 2.

    studygroup explain [TEXT] [--top K] [--measure-heads N|all] [--measure-members N|all]
                       [--silence-member J] [--silence-head L.H]
    studygroup compare TEXT_A TEXT_B [--silence-member J] [--silence-head L.H]
    studygroup head [TEXT] --layer L --head H [--notation paper|columns] [--rows A:B] [--keys C:D] [--full]
                    [--silence-member J] [--silence-head L.H] [--generate N [--temperature T] [--seed S] ...]
                    [--chat [--system TEXT]]
    studygroup lesson [TEXT] [--head L.H] [--section N] [--html FILE]   (at a terminal: one section at a time)
    studygroup why [TEXT] --layer L --head H --key J [--query I] [--silence-member J] [--silence-head L.H]
                    [--ablation zero|mean|resample [--reference FILE ...] [--from TEXT]]
    studygroup lens [TEXT] [--all-positions | --rows A:B]   (the logit lens)
    studygroup patch CLEAN CORRUPTED [--answer WORD] [--wrong WORD] [--full]   (activation patching)
    studygroup ablate [TEXT] [--head L.H] [--reference FILE ...] [--from TEXT]   (zero, mean, resample)
    studygroup roles [TEXT]
    studygroup survey [FILES…] --out DIR [--corpus probe|pydoc] [--n N] [--tokens N] [--ray [ADDRESS]]
                    [--workers N] [--shard-size N] [--seed S]   (every head's roles over a corpus)
    studygroup survey --report DIR [DIR2]   (HTML and PNGs; two surveys side by side)
    studygroup models [--full]   (the GGUF models on this disk)
    studygroup generate TEXT -n N [--temperature T] [--top-k K] [--top-p P] [--seed S] [--ignore-eos]
                    [--candidates K] [--chat [--system TEXT]] [--silence-member J] [--silence-head L.H]
                    [--ablation zero|mean|resample [--reference FILE ...] [--from TEXT]]

Every command takes --json (print the result as JSON instead), --top K and --model PATH.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

from studygroup.study import DEFAULT_TEXT
from studygroup.views.output_file import check_writable, write_text


class ArgumentError(Exception):
    """A bad command-line argument (argparse's message, kept to one line)."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):  # no prefixes: "--silence-mem" is no option, whatever it starts
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str):  # argparse would print the usage too: keep it to one line
        raise ArgumentError(f"{message} (see: {self.prog} --help)")


def _integer(s: str) -> int:
    """An integer as digits (int() would also take " 1", "+1", "1_0" and other scripts' digits)."""
    if not re.fullmatch(r"-?[0-9]+", s):
        raise argparse.ArgumentTypeError(f"{s!r} is not a whole number")
    return int(s)


def _whole(least: int):
    def parse(s: str) -> int:
        n = _integer(s)
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


def _members_slice(s: str) -> slice:
    """"A:B" (a Python slice of the members: half-open, either end left out, negatives from the end)."""
    m = re.fullmatch(r"(-?[0-9]+)?:(-?[0-9]+)?", s)
    if m is None:
        raise argparse.ArgumentTypeError(f"{s!r} is not A:B, a slice of the members such as 0:16 or -1:")
    return slice(*(None if x is None else int(x) for x in m.groups()))


def _number(s: str) -> float:
    """A finite decimal number ("0.7", "1e-3"); not nan or inf."""
    try:
        x = float(s)
    except ValueError:
        x = float("nan")
    if x != x or x in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{s!r} is not a number")
    return x


def _common(p: argparse.ArgumentParser, top: int, top_help: str) -> None:
    p.add_argument("--top", type=_whole(1), default=top, metavar="K", help=top_help)
    _model_options(p)


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="MODEL",
                   help="a GGUF file, ollama:NAME[:TAG], a packaged name (gemma-3-270m, qwen2.5-coder-0.5b, "
                        "qwen2.5-coder-1.5b) or a name `studygroup models` shows "
                        "(default: SmolLM2-135M-Instruct)")
    p.add_argument("--json", action="store_true", help="print the result as JSON (see docs/json.md)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda, where available")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="float32 (exact, default) or bfloat16 (fast mode, where the CPU multiplies it natively)")


def _figures(p: argparse.ArgumentParser) -> None:
    p.add_argument("--png", default=None, metavar="FILE", help="also save the figure as PNG (slides)")
    p.add_argument("--svg", default=None, metavar="FILE", help="also save the figure as SVG (papers; text stays text)")


def _silencing(p: argparse.ArgumentParser) -> None:
    p.add_argument("--measure-heads", dest="measure_heads", type=_count_or_all, default=None,
                   metavar="N|all", help="how many heads to measure exactly, each silenced alone (default: every head "
                   "up to 10 tokens, else candidates until 16 in a row are small; all: every head, slower)")
    p.add_argument("--measure-members", dest="measure_members", type=_count_or_all, default=None,
                   metavar="N|all", help="measure every member up to N tokens, else the N with the largest direct "
                   "shares (default: every member up to 24 tokens, else 24)")


def _interventions(p: argparse.ArgumentParser, shown: str) -> None:
    """--silence-member J and --silence-head L.H (repeatable): `shown` in a run with them silenced."""
    p.add_argument("--silence-member", type=_whole(0), action="append", default=[], metavar="J",
                   help=f"{shown} in a run where nobody hears member J, in every head (repeatable)")
    p.add_argument("--silence-head", type=_layer_head, action="append", default=[], metavar="L.H",
                   help=f"{shown} in a run where head H of layer L writes nothing (repeatable)")


def _ablation_sources(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reference", nargs="+", default=None, metavar="FILE",
                   help="text files whose members' mean the mean ablation puts in (default: the text's own members)")
    p.add_argument("--from", dest="resample_from", default=None, metavar="TEXT",
                   help="resample: each head's output (and member's key and value) taken from this text (of the same "
                        "number of tokens)")


def _ablation_options(p: argparse.ArgumentParser, what: str, note: str = "") -> None:
    """--ablation zero|mean|resample for `what`, with its --reference files and --from text; `note`
    ends its help."""
    p.add_argument("--ablation", default="zero", choices=("zero", "mean", "resample"),
                   help=f"how {what} taken out: zero (a head's write zeroed, a member's keys removed: the default), "
                        "mean (a head's output, a member's key and value, replaced by their mean over the members, or "
                        f"over --reference files), resample (taken from --from TEXT){note}")
    _ablation_sources(p)


def _generate_parser(sub) -> None:
    p = sub.add_parser("generate", help="the group keeps talking: words after the text, each a new member")
    p.add_argument("text")
    p.add_argument("-n", type=_whole(1), default=20, metavar="N", help="how many words at most (default 20)")
    _sampling(p)
    p.add_argument("--candidates", type=_whole(1), default=5, metavar="K",
                   help="the most likely words listed per word in --json (default 5)")
    _chat_options(p)
    _interventions(p, "also the continuation")
    _ablation_options(p, "the silenced members and heads are", "; in generation the mean is over the prompt's members, "
                      "taken before the first word, and a generated member's resampled output is the one in --from TEXT "
                      "followed by the same words")
    _model_options(p)
    p.set_defaults(handler=_generate)


#: How the command line spells a window (head's and lens's --rows, head's --keys), for a WindowError's message.
WINDOW_NAMES = {"rows": "--rows A:B", "keys": "--keys C:D"}
#: The sampling flags' defaults: the most likely word each time, up to the end-of-text token.
SAMPLING_DEFAULTS = dict(temperature=0.0, top_k=None, top_p=1.0, seed=None, ignore_eos=False)


def _sampling(p: argparse.ArgumentParser) -> None:
    """How each generated word is chosen: greedy by default, or drawn (temperature, top-k, top-p, seed)."""
    p.add_argument("--temperature", type=_number, metavar="T", help="0: the most likely word (default); "
                   "above 0: words drawn from softmax(logits / T)")
    p.add_argument("--top-k", type=_integer, metavar="K", help="draw from the K most likely words only")
    p.add_argument("--top-p", type=_number, metavar="P",
                   help="draw from the fewest most likely words whose probabilities reach P, in (0, 1] (default 1)")
    p.add_argument("--seed", type=_integer, metavar="S", help="the same seed gives the same words")
    p.add_argument("--ignore-eos", action="store_true", help="go on past the model's end-of-text token")
    p.set_defaults(**SAMPLING_DEFAULTS)


def _sampled(args) -> dict:
    """The sampling flags as Model.generate's keywords, checked by the library's one rule (InputError)."""
    from studygroup.model.sampling import Sampling

    Sampling(args.temperature, args.top_k, args.top_p, args.seed)
    return {k: getattr(args, k) for k in SAMPLING_DEFAULTS}


def _chat_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chat", action="store_true", help="the text is the user's turn in the model's own chat "
                   "template (its markup as special tokens; what you type stays text)")
    p.add_argument("--system", default=None, metavar="TEXT", help="with --chat: a system turn before the user's")


def _prompt(model, args):
    """The text, or with --chat its ids in the model's chat template."""
    from studygroup.errors import InputError

    if args.system is not None and not args.chat:
        raise InputError("--system goes with --chat (a system turn in the model's chat template)")
    return model.chat(args.text, args.system) if args.chat else args.text


def _version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("studygroup")
    except PackageNotFoundError:
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="studygroup", description="The attention layer of a real model, as a study group.")
    parser.add_argument("--version", action="version", version=f"studygroup {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("explain", help="the members of a text, the group's conclusion, and who decided it")
    p.add_argument("text", nargs="?", default=DEFAULT_TEXT)
    _common(p, 10, "how many next words to list (default 10)")
    _silencing(p)
    _figures(p)
    p.add_argument("--html", default=None, metavar="FILE", help="also write a self-contained HTML report")
    p.add_argument("--full", action="store_true", help="list every measured head and member (default: the most decisive)")
    _interventions(p, "explain the conclusion")
    _ablation_options(p, "each head and member measured is")
    p.add_argument("--generate", type=_whole(1), default=None, metavar="N",
                   help="generate N words (greedy) and explain one of them (--word)")
    p.add_argument("--word", type=_whole(1), default=None, metavar="K",
                   help="with --generate: explain why generated word K (from 1) was chosen; its members are the text "
                        "and the K-1 words before it")
    _chat_options(p)
    p.set_defaults(handler=_explain)
    p = sub.add_parser("compare", help="what a longer context does to the conclusion, and who accounts for it")
    p.add_argument("text_a")
    p.add_argument("text_b")
    _common(p, 10, "how many next words of each text to list (default 10)")
    _silencing(p)
    _interventions(p, "compare the conclusions (member J of each text)")
    _ablation_options(p, "each head and member measured (in both texts, with nothing silenced) is")
    _figures(p)
    p.set_defaults(handler=_compare)
    p = sub.add_parser("head", help="one head as a full study group")
    p.add_argument("text", nargs="?", default=DEFAULT_TEXT)
    p.add_argument("--layer", type=_integer, required=True)  # the model says which exist
    p.add_argument("--head", type=_integer, required=True)
    p.add_argument("--notation", default="paper", help="paper (rows are members) or columns (3Blue1Brown)")
    p.add_argument("--rows", type=_members_slice, default=None, metavar="A:B",
                   help="the questions shown: members A to B-1 (Python slice; -1: the last); past 256 members "
                        "a view needs a window (text: the last question by default)")
    p.add_argument("--keys", type=_members_slice, default=None, metavar="C:D",
                   help="the answers shown: members C to D-1 (Python slice; default every member)")
    p.add_argument("--full", action="store_true",
                   help="print the whole window as text (by default at most 100 lines of 400 characters)")
    _interventions(p, "the head")
    _ablation_options(p, "the silenced members and heads are")
    p.add_argument("--generate", type=_whole(1), default=None, metavar="N",
                   help="generate N words after the text (with nothing silenced) and show the head over the text "
                        "and them (generated members marked *)")
    _sampling(p)
    _chat_options(p)
    _common(p, 4, "how many of each vector's largest entries to show (default 4)")
    _figures(p)
    p.set_defaults(handler=_head)
    p = sub.add_parser("lesson", help="the article's walkthrough in the page's sections, with the real model's numbers")
    p.add_argument("text", nargs="?", default=None,
                   help=f"the text (default: the article's “{DEFAULT_TEXT}”; the conclusion compares it with the "
                        "text without its first sentence)")
    p.add_argument("--head", type=_layer_head, default=None, metavar="L.H",
                   help="the head followed (default: the most decisive not resting on a sink)")
    p.add_argument("--section", type=int, default=None, metavar="N", help="show section N only (1-8)")
    p.add_argument("--html", default=None, metavar="FILE", help="write the lesson as a self-contained HTML page")
    _common(p, 5, "how many next words the conclusion lists (default 5)")
    p.set_defaults(handler=_lesson)
    p = sub.add_parser("why", help="why member I listens to member J in one head: the score split into its parts")
    p.add_argument("text", nargs="?", default=DEFAULT_TEXT)
    p.add_argument("--layer", type=_integer, required=True)
    p.add_argument("--head", type=_integer, required=True)
    p.add_argument("--query", type=_integer, default=None, metavar="I", help="the member asking (default: the last)")
    p.add_argument("--key", type=_integer, required=True, metavar="J", help="the member answering (J <= I)")
    _interventions(p, "the score")
    _ablation_options(p, "the silenced members and heads are")
    _common(p, 20, "how many of the largest part pairs to show (default 20)")
    p.set_defaults(handler=_why)
    p = sub.add_parser("lens", help="the logit lens: what the group would conclude after each layer")
    p.add_argument("text", nargs="?", default=DEFAULT_TEXT)
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--rows", type=_members_slice, default=None, metavar="A:B",
                       help="the members shown: A to B-1 (Python slice; default: the last member)")
    shown.add_argument("--all-positions", action="store_true",
                       help="every member up to 64, else the last 64 (each a row of the unembedding per layer)")
    _common(p, 3, "how many top words each cell keeps in --json (default 3)")
    p.set_defaults(handler=_lens)
    p = sub.add_parser("patch", help="activation patching: which layer, member and head carry the difference "
                       "between a clean and a corrupted text of the same length")
    p.add_argument("clean")
    p.add_argument("corrupted")
    p.add_argument("--answer", default=None, metavar="WORD",
                   help="the metric's first word, one token (default: the clean run's top word)")
    p.add_argument("--wrong", default=None, metavar="WORD",
                   help="the metric's second word, one token (default: the corrupted run's top word)")
    p.add_argument("--full", action="store_true", help="print every grid (default: resid_pre and the heads)")
    _model_options(p)
    p.set_defaults(handler=_patch)
    p = sub.add_parser("ablate", help="each head's effect under zero, mean and resample ablation")
    p.add_argument("text", nargs="?", default=DEFAULT_TEXT)
    p.add_argument("--head", type=_layer_head, action="append", default=None, metavar="L.H",
                   help="a head to measure (repeatable; default every head)")
    _ablation_sources(p)
    _common(p, 10, "how many heads to list (default 10, by |zero ablation effect|)")
    p.set_defaults(handler=_ablate)
    p = sub.add_parser("roles", help="what each head does: previous, duplicate, induction, sink, local, broad")
    p.add_argument("text", nargs="?", default=None, help="a text (default: the standard probe, 50 tokens twice)")
    _common(p, 5, "how many heads to list per role (default 5)")
    p.set_defaults(handler=_roles)
    _survey_parser(sub)
    p = sub.add_parser("models", help="the GGUF models on this disk (Ollama, LM Studio, Hugging Face, llama.cpp) "
                       "and whether studygroup reads them")
    p.add_argument("--json", action="store_true", help="print the list as JSON (see docs/json.md)")
    p.add_argument("--full", action="store_true", help="list every model and reason in full")
    p.set_defaults(handler=_models)
    _generate_parser(sub)
    from studygroup.web import serve  # light: the web app is imported only when `serve` runs

    serve.add_parser(sub)
    return parser


def _survey_parser(sub) -> None:
    p = sub.add_parser("survey", help="every head's roles over a corpus, into Parquet files, with intervals "
                       "(local processes, or Ray)")
    p.add_argument("files", nargs="*", metavar="FILES", help="text files or folders of them (or --corpus)")
    p.add_argument("--out", default=None, metavar="DIR", help="the survey's folder (a rerun resumes it)")
    p.add_argument("--corpus", default=None, choices=("probe", "pydoc"),
                   help="probe: repeated random tokens (--n sequences, seeded); pydoc: Python's help topics")
    p.add_argument("--n", type=_whole(1), default=None, metavar="N",
                   help="how many sequences (probe: default 200; files, pydoc: default all)")
    p.add_argument("--tokens", type=_integer, default=64, metavar="N", help="tokens per sequence (default 64)")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run on Ray: alone, a Ray started on this machine; auto or HOST:PORT, a running cluster")
    p.add_argument("--workers", type=_whole(1), default=None, metavar="N",
                   help="the processes on this machine: the local pool's, or a local Ray's CPUs (default: one per core)")
    p.add_argument("--shard-size", type=_whole(1), default=10, metavar="N", help="sequences per shard (default 10)")
    p.add_argument("--seed", type=_whole(0), default=0, metavar="S", help="the probe's and the bootstrap's seed")
    p.add_argument("--report", nargs="+", default=None, metavar="DIR",
                   help="write DIR/report/ (HTML and PNGs) from a finished survey; two folders side by side")
    _common(p, 5, "how many heads the report lists per role (default 5)")
    p.set_defaults(handler=_survey)


def _survey(args) -> str:
    from studygroup.errors import InputError

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise InputError("studygroup survey writes Parquet files: pip install 'studygroup[survey]' (pyarrow)") from None
    from studygroup.study.survey.survey import load_survey, survey

    if args.report is not None:
        if args.out is not None or args.files or args.corpus is not None or len(args.report) > 2:
            raise InputError("--report DIR [DIR2] reads one or two finished surveys: give nothing else")
        from studygroup.views.survey_report import write_report

        surveys = [load_survey(d) for d in args.report]
        path = write_report(surveys, top=args.top)
        if args.json:  # each survey's own JSON, and where its report went
            return json.dumps({"report": str(path), "surveys": [json.loads(s.to_json()) for s in surveys]}, indent=2)
        return "\n".join([*(line for s in surveys for line in [f"{s.folder}:", *s.story()]),
                          f"studygroup: wrote the report to {path}"])
    if args.out is None:
        raise InputError("give --out DIR, the folder the survey writes (or --report DIR)")
    s = survey(args.out, args.files, args.corpus, args.n, args.tokens, args.model, args.ray, args.workers,
               args.shard_size, args.seed)
    return s.to_json(indent=2) if args.json else "\n".join([*s.story(), f"studygroup: wrote {args.out}"])


def _load(args):
    from studygroup.model.model import load

    return load(args.model, device=args.device, dtype=args.dtype, defer_cache_write=True)  # written after the output


def _check_figures(args) -> None:
    """Refuse unwritable --png/--svg/--html paths before the work starts."""
    if getattr(args, "png", None) is not None or getattr(args, "svg", None) is not None:
        from studygroup.views import figures

        for path, kind in ((args.png, "png"), (args.svg, "svg")):
            if path is not None:
                figures.check_path(path, kind)
    if getattr(args, "html", None) is not None:
        check_writable(args.html, "report.html")


def _save_figures(args, make_figure) -> None:
    if args.png is not None or args.svg is not None:
        from studygroup.views import figures

        fig = make_figure(figures)
        for path in (args.png, args.svg):
            if path is not None:
                figures.save(fig, path)
                _wrote(path)


def _wrote(path) -> None:
    """One line on stderr per file written (stdout keeps the result alone, e.g. the JSON)."""
    print(f"studygroup: wrote {path}", file=sys.stderr)


def _explain(args) -> str:
    from studygroup.views import text as render_text
    from studygroup.study.explain import explain

    _check_figures(args)
    from studygroup.errors import InputError

    if args.html is not None and (args.silence_member or args.silence_head):
        raise InputError("--html writes the text's own views, with nothing silenced: leave out --silence-member "
                         "and --silence-head, or --html")
    if args.html is not None and args.chat:
        raise InputError("--html writes the text's own views, not a chat's: leave out --chat, or --html")
    model = _load(args)
    text, word, generated_from = _generated_word(model, args, _prompt(model, args))
    e = explain(model, text, top=args.top, measure_heads=args.measure_heads, measure_members=args.measure_members,
                interventions=_chosen(args), word=word, generated_from=generated_from)
    _save_figures(args, lambda figures: figures.explain_figure(e.to_dict()))
    if args.html is not None:
        from studygroup.views import payloads
        from studygroup.views import report

        report.write_report(payloads.report_data(model, args.text, top=args.top, explained=e), args.html)
        _wrote(args.html)
    return e.to_json(indent=2) if args.json else render_text.explanation(e, full=args.full)


def _generated_word(model, args, prompt) -> tuple:
    """(the text or ids to explain, the word's id or None, the first generated member or None): with
    --generate N --word K, the prompt's ids and the K-1 generated ids before word K (never the
    decoded text tokenized again), K's id, and the prompt's length."""
    from studygroup.errors import InputError

    if args.generate is None and args.word is None:
        return prompt, None, None
    if args.generate is None or args.word is None:
        raise InputError("--generate N and --word K go together: generate N words, explain word K")
    if args.word > args.generate:
        raise InputError(f"--word {args.word} is past the {args.generate} words generated")
    g = model.generate(prompt, args.generate)
    if args.word > len(g.words):
        raise InputError(f"--word {args.word}: the model ended the text after {len(g.words)} words")
    return g.prompt_ids + g.ids[:args.word - 1], g.ids[args.word - 1], len(g.prompt_ids)


def _compare(args) -> str:
    from studygroup.views import text as render_text
    from studygroup.study.compare import compare

    _check_figures(args)
    c = compare(_load(args), args.text_a, args.text_b, top=args.top, measure_heads=args.measure_heads,
                measure_members=args.measure_members, interventions=_chosen(args))
    _save_figures(args, lambda figures: figures.compare_figure(c.to_dict()))
    return c.to_json(indent=2) if args.json else render_text.comparison(c)


def _head(args) -> str:
    from studygroup.views import text as render_text
    from studygroup.study.head import check_notation, head_view
    from studygroup.study.window import or_last_question

    check_notation(args.notation)
    _check_figures(args)
    _sampled(args)  # refused before the model loads
    chosen = _chosen(args, of_the_silenced=True)
    model = _load(args)
    text, generated_from = _with_generated(model, args)
    rows, keys = args.rows, args.keys
    if not args.json:  # text: a long text's last question unless a window is given
        rows, keys = or_last_question(len(model.ids(text)), rows, keys)
    v = head_view(model, text, args.layer, args.head, args.notation, largest=args.top,
                  interventions=chosen, rows=rows, keys=keys, generated_from=generated_from)
    if args.png is not None or args.svg is not None:
        _check_figure_window(v)
    _save_figures(args, lambda figures: figures.head_view_figure(v.to_dict()))
    return v.to_json(indent=2) if args.json else render_text.head_view(v, full=args.full, ablation=chosen.ablation_field().get("ablation"))


def _with_generated(model, args) -> tuple:
    """(the text or ids, the first generated member or None): with --generate N, the text's ids (with
    --chat, in the model's chat template) and the N words generated after them (never the decoded text
    tokenized again)."""
    from studygroup.errors import InputError

    prompt = _prompt(model, args)
    if args.generate is None:
        if _sampled(args) != SAMPLING_DEFAULTS:
            raise InputError("--temperature, --top-k, --top-p, --seed and --ignore-eos choose generated words: "
                             "give them with --generate N")
        return prompt, None
    g = model.generate(prompt, args.generate, **_sampled(args))
    return g.prompt_ids + g.ids, len(g.prompt_ids)


def _check_figure_window(v) -> None:
    """The head's figure draws whole rows of the last questions: every answer, questions to the end."""
    from studygroup.errors import InputError

    T = len(v.tokens)
    if v.keys_shown != [0, T] or v.rows_shown[1] != T:
        raise InputError(f"--png/--svg draw the last questions over every answer: with them give --rows A: "
                         f"(to the end) and no --keys (the window is {v.rows_shown[0]}:{v.rows_shown[1]} × "
                         f"{v.keys_shown[0]}:{v.keys_shown[1]} of {T} members)")


def _lesson(args) -> str:
    """`lesson [TEXT]`: the lesson's sections (study.lesson_sections) on TEXT (default: the article's
    text), the same numbers as /api/lesson; at a terminal one section at a time."""
    import json

    from studygroup.study import lesson_sections as ls
    from studygroup.views import lesson_html as render_html
    from studygroup.views import lesson_text as render_text
    from studygroup.views.payloads import explanation

    if args.section is not None:
        ls.check_section(args.section)
    if args.html is not None:
        check_writable(args.html, "lesson.html")
    model, text = _load(args), args.text if args.text is not None else DEFAULT_TEXT
    if args.head is None:
        layer, head = ls.default_head(model, text, [(e.layer, e.head) for e in explanation(model, text).heads])
    else:
        layer, head = args.head
    l = ls.lesson_sections(model, text, layer, head, top=args.top)
    if args.html is not None:
        write_text(args.html, render_html.lesson_html(l))
        return f"studygroup: wrote the lesson to {args.html}"
    if args.json:
        return json.dumps(l.section(args.section), ensure_ascii=False, indent=2) if args.section else l.to_json(indent=2)
    if args.section is None and sys.stdin.isatty() and sys.stdout.isatty():
        return _page([render_text.lesson_section(l, n) for n in range(1, len(l.sections) + 1)])
    return render_text.lesson(l, args.section)


def _why(args) -> str:
    from studygroup.views import text as render_text
    from studygroup.study.why import why

    chosen = _chosen(args, of_the_silenced=True)  # refused before the model loads
    model = _load(args)
    query = len(model.ids(args.text)) - 1 if args.query is None else args.query
    w = why(model, args.text, args.layer, args.head, query, args.key, chosen)
    return w.to_json(indent=2) if args.json else render_text.why(w, shown=min(args.top, 20))


def _lens(args) -> str:
    from studygroup.study.lens import lens
    from studygroup.views import instruments_text

    e = lens(_load(args), args.text, top=args.top, positions=args.rows, all_positions=args.all_positions)
    return e.to_json(indent=2) if args.json else instruments_text.lens(e)


def _patch(args) -> str:
    from studygroup.progress import say
    from studygroup.study.patching import checked, cost, patch
    from studygroup.views import instruments_text

    model = _load(args)
    say(cost(model, len(checked(model, args.clean, args.corrupted, args.answer, args.wrong)[0])))
    p = patch(model, args.clean, args.corrupted, answer=args.answer, wrong=args.wrong)
    return p.to_json(indent=2) if args.json else instruments_text.patching(p, full=args.full)


def _ablate(args) -> str:
    from studygroup.study.ablation import head_effects
    from studygroup.views import instruments_text

    reference = None if args.reference is None else [_read_text(f) for f in args.reference]
    a = head_effects(_load(args), args.text, args.head, reference=reference, resample_from=args.resample_from)
    return a.to_json(indent=2) if args.json else instruments_text.ablations(a, shown=args.top)


def _chosen(args, of_the_silenced: bool = False):
    """The Interventions of --silence-member, --silence-head and --ablation (with its --reference files
    or --from text; one line where they do not go together), checked later against the text.
    of_the_silenced: the ablation takes out only what is silenced (head, why, generate), so one with
    nothing silenced is refused rather than ignored."""
    from studygroup.errors import InputError
    from studygroup.model.ablation import Ablation
    from studygroup.model.interventions import Interventions

    how = getattr(args, "ablation", "zero")
    if of_the_silenced and how != "zero" and not args.silence_member and not args.silence_head:
        raise InputError(f"--ablation {how} takes out the silenced members and heads, and nothing is silenced: give "
                         "--silence-member J or --silence-head L.H")
    reference = () if getattr(args, "reference", None) is None else tuple(_read_text(f) for f in args.reference)
    return Interventions(tuple(args.silence_member), None, frozenset(args.silence_head),
                         ablation=Ablation(how, reference, getattr(args, "resample_from", None)))


def _read_text(path: str) -> str:
    """A reference file's text: InputError (one line) where it cannot be read as UTF-8 text."""
    from pathlib import Path

    from studygroup.errors import InputError

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read {path} as UTF-8 text: {getattr(e, 'strerror', None) or e}") from None
    if not text.strip():
        raise InputError(f"{path} holds no text: a reference file's members are what the mean is taken over, so give "
                         "one with at least one word")
    return text


def _roles(args) -> str:
    from studygroup.views import text as render_text
    from studygroup.study.roles import roles

    r = roles(_load(args), args.text)
    return r.to_json(indent=2) if args.json else render_text.roles(r, shown=min(args.top, 10))


def _models(args) -> str:
    import json

    from studygroup.model.model_names import listing
    from studygroup.views import text as render_text

    listed, skipped = listing()
    if args.json:
        return json.dumps({"models": [m.to_dict() for m in listed], "skipped": skipped}, indent=2)
    return render_text.models(listed, skipped, full=args.full)


def _generate(args) -> str:
    from studygroup.views import generation_text as render_text

    kw = dict(n=args.n, **_sampled(args), candidates=args.candidates)  # refused before the model loads
    silenced = _chosen(args, of_the_silenced=True)
    model = _load(args)
    prompt = _prompt(model, args)
    model.before_pass(prompt, silenced)  # bad members or heads: refused before any word
    if args.json:
        g = model.generate(prompt, **kw)
        out = {**g.to_json(), "sampling": {k: kw[k] for k in SAMPLING_DEFAULTS}}  # what reruns it
        if args.silence_member or args.silence_head:
            out["silenced"] = model.generate(prompt, **kw, interventions=silenced).to_json()
        return json.dumps(out, indent=2, ensure_ascii=False)
    stream = render_text.Stream(model.tokenizer, model.tokenizer.decode(prompt) if args.chat else args.text)
    with _interrupts_kept() as interrupted:
        def on_word(w):
            if interrupted:  # a Ctrl+C whose KeyboardInterrupt was raised where it is ignored (a finaliser)
                raise KeyboardInterrupt
            print(stream.add(w.id), end="", flush=True)

        g = model.generate(prompt, **kw, on_word=on_word)
    print(stream.rest())
    lines = [render_text.generation_end(g)]
    if args.silence_member or args.silence_head:
        from studygroup.study.continuations import continuations

        lines.append(render_text.continuations(continuations(model, prompt, g, kw, silenced)))
    return "\n".join(l for l in lines if l)


class _interrupts_kept:
    """`with _interrupts_kept() as interrupted:` Ctrl+C raises KeyboardInterrupt as always and is also
    noted in `interrupted` (a list), so a loop can raise it again where Python ignored it (an
    exception raised inside a finaliser is printed and dropped). The handler before is restored after."""

    def __enter__(self) -> list:
        import signal
        import threading

        self.seen: list = []
        main = threading.current_thread() is threading.main_thread()  # the only thread that may set a handler
        self.before = signal.getsignal(signal.SIGINT) if main else None
        if self.before is signal.default_int_handler:  # only where Ctrl+C means KeyboardInterrupt
            signal.signal(signal.SIGINT, self._handle)
        return self.seen

    def _handle(self, signum, frame):
        self.seen.append(signum)
        raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        import signal

        if self.before is signal.default_int_handler:
            signal.signal(signal.SIGINT, self.before)


def _page(pages: list[str]) -> str:
    """At a terminal: one section at a time, Enter for the next, q to stop. Returns the last."""
    for page in pages[:-1]:
        print(page)
        try:
            answer = input("── Enter: next section, q: quit ── ")
        except EOFError:  # Ctrl-D: the reader is done
            print()
            return ""
        if answer.strip().lower().startswith("q"):
            return ""
    return pages[-1]


def main(argv: list[str] | None = None) -> int:
    from studygroup.model import threads
    from studygroup.errors import StudyGroupError, WindowError

    words = sys.argv[1:] if argv is None else argv
    threads.set_wait_policy(serving=words[:1] == ["serve"])  # before torch is imported (see studygroup.model.threads)
    for stream in (sys.stdout, sys.stderr):  # a terminal or pipe that cannot encode ␣ or ↵ gets \u2423
        if stream is not None and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    code = 0
    try:
        args = _parse(build_parser(), argv)
        _print(_bounded(args, args.handler(args)))
    except (StudyGroupError, ArgumentError) as e:
        said = e.spelled(WINDOW_NAMES) if isinstance(e, WindowError) else str(e)  # a window named by its flags
        print("studygroup: error: " + " ".join(said.split()), file=sys.stderr)  # one line
        code = 2
    except OutputError as e:
        print(f"studygroup: error: cannot write the output: {e}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        print("studygroup: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader stopped reading (`studygroup explain ... | head`): nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so no later flush fails too
    _write_deferred_caches()
    return code


def _write_deferred_caches() -> None:
    """A first load's weights cache, written once the answer is out (1.5 s sooner on screen)."""
    weights_cache = sys.modules.get("studygroup.model.weights_cache")  # imported only if a model was loaded
    if weights_cache is not None:  # (the answer was flushed by _print)
        weights_cache.write_deferred()


class OutputError(Exception):
    """Standard output refused the result (a full disk, say)."""


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """parse_args, but an argument no command knows is blamed on the command it followed."""
    args, extras = parser.parse_known_args(_joined_slices(sys.argv[1:] if argv is None else argv))
    for extra in extras:
        _refuse_near_miss(extra.split("=")[0], args)
    if extras:
        raise ArgumentError(f"unrecognized arguments: {' '.join(extras)} (see: {parser.prog} {args.command} --help)")
    return args


# Flags one letter from two options that mean different things: {flag: ((dest, the option, what it does), ...)}.
NEAR_MISSES = {
    "--silence-members": (("silence_member", "--silence-member J", "nobody hears member J"),
                          ("measure_members", "--measure-members N|all", "how many members are measured")),
    "--silence-heads": (("silence_head", "--silence-head L.H", "head H of layer L writes nothing"),
                        ("measure_heads", "--measure-heads N|all", "how many heads are measured")),
}


def _refuse_near_miss(flag: str, args: argparse.Namespace) -> None:
    """An error naming the options `flag` may have meant, those the command has."""
    meant = [f"{option} ({does})" for dest, option, does in NEAR_MISSES.get(flag, ()) if hasattr(args, dest)]
    if meant:
        raise ArgumentError(f"{flag} is not an option: did you mean {' or '.join(meant)}? "
                            f"(see: studygroup {args.command} --help)")


def _joined_slices(argv: list[str]) -> list[str]:
    """["--rows", "-1:"] as ["--rows=-1:"]: argparse would take "-1:" for an option."""
    out = []
    for a in argv:
        if out and out[-1] in ("--rows", "--keys") and re.fullmatch(r"-[0-9]+:(-?[0-9]+)?", a):
            out[-1] += "=" + a
        else:
            out.append(a)
    return out


def _bounded(args, text: str) -> str:
    """Text output within 100 lines of 400 characters unless --full (JSON whole)."""
    from studygroup.views.text import bounded
    rest = "--full shows them all, --json gives every number" if hasattr(args, "full") else "--json gives every number"
    return bounded(text, full=getattr(args, "full", False) or getattr(args, "json", False), rest=rest)


def _print(text: str) -> None:
    """Print the result and flush it now, so that a stdout that refuses it is an error here."""
    if sys.stdout is None:  # started with stdout closed: nowhere to print
        return
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputError(e.strerror or str(e)) from None


def run() -> None:
    """The console script: main(), then exit at once. Python's orderly teardown of torch's
    modules takes ~0.5 s after the work is done; every file written is closed by then."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except OSError:  # the reader went away, or the disk is full, after the last write: nothing to add
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
