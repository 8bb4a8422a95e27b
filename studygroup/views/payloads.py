"""What the web page, the HTML report and the notebook view show, gathered from the study layer.

Each function calls the study layer (`studygroup.study.explain`, `model_view`, `head`, `lens`, ...) and
returns plain JSON-able dicts (the payloads of docs/web-api.md). The server, the report and the
notebook share them, so the three show the same numbers; the server reaches the study layer only
through this module (the page's pass, `page_run`, and a text's check, `checked_ids`, among them),
and checks a lens's rows and patching's texts here. Every number is the study layer's: this
module chooses what to call and how the page reads it, and never calls the model itself.
"""
from __future__ import annotations

from studygroup.errors import InputError
from studygroup.model.interventions import Interventions
from studygroup.study import DEFAULT_TEXT
from studygroup.study import conclusion as study_conclusion
from studygroup.study import lens as study_lens
from studygroup.study import overview as study_overview
from studygroup.study import patching
from studygroup.study import why as study_why
from studygroup.study.compare import compare
from studygroup.study.explain import explain
from studygroup.study.head import NOTATIONS, answer_contributions, head_view
from studygroup.study.lesson_sections import default_head, lesson_sections
from studygroup.study.window import members_in
from studygroup.study.model_view import FULL_MAPS_MAX_T
from studygroup.study.model_view import model_view as _model_view
from studygroup.study.model_view import thumbnails
from studygroup.study.page_run import page_run
from studygroup.study.results import model_info
from studygroup.study.text_ids import checked_ids
from studygroup.views import compact_json

#: Decimals kept in the model view's thumbnails (the head view carries full precision).
THUMBNAIL_DECIMALS = 3
#: How many decisive heads a report carries whole (both notations).
REPORT_HEADS = 3
#: The most blocks on a side of a head's overview (what /api/overview's `side` may ask).
OVERVIEW_SIDE = study_overview.SIDE


def conclusion(model, text, top: int = 10, interventions: Interventions = Interventions(), base=None,
               after=None) -> dict:
    """The members and the top next words, before and (when anything is silenced) after silencing
    (by the interventions' ablation, named in "ablation" unless zero): study.conclusion as the page
    reads it. `words` lists every word of either top list with its probability before and after, so
    the page can draw the old value as a ghost bar; `silenced_story`, the story's conclusion
    sentence told from the silenced run's top words.

    >>> d = conclusion(model, "I have a lot", interventions=Interventions(silenced_members=(2,)))
    >>> d["top"][0]["token"], d["words"][0]["prob_before"] > 0
    ('␣of', True)
    """
    c = study_conclusion.conclusion(model, text, top, interventions, base, after)
    i = c.interventions
    return {"tokens": c.tokens, "token_ids": c.token_ids, "top": [w.to_dict() for w in c.top],
            **i.silenced(), **i.ablation_field(),
            "silenced": None if c.silenced is None else [w.to_dict() for w in c.silenced],
            "silenced_story": c.silenced_story, "words": [w.to_dict() for w in c.words]}


def explanation(model, text, top: int = 10, interventions: Interventions = Interventions(),
                measure_heads: int | str | None = None, reuse=None):
    """study.explain on `text` (in a run with these interventions): the Explanation object (its
    .to_dict() is the API's payload). measure_heads: how many heads to measure exactly (a number or
    "all"; None: explain's default). reuse: an explanation of the same text and silencing whose
    heads measured at every position are not measured again (study.explain's reuse)."""
    return explain(model, text, top=top, interventions=interventions, measure_heads=measure_heads, reuse=reuse)


def comparison(model, text_a, text_b, top: int = 10, interventions: Interventions = Interventions()):
    """study_compare.compare(text_a, text_b) (in runs with these interventions): the Comparison object."""
    return compare(model, text_a, text_b, top=top, interventions=interventions)


def model_view(model, text, explanation=None, interventions: Interventions = Interventions(), run=None) -> dict:
    """Every head's weights on `text`, layer × head, grouped by key/value head, decisive heads ranked.

    Thumbnail weights are rounded to THUMBNAIL_DECIMALS (exact values are in the head view).
    interventions: the weights of a run with these (members silenced in every head).
    run: that run (page_run), when the caller has it.
    """
    if run is None:
        run = page_run(model, text, interventions)
    return _model_view(run, explanation, THUMBNAIL_DECIMALS).to_dict() | _view_fields(run)


def model_view_json(model, text, explanation=None, interventions: Interventions = Interventions(), run=None,
                    packed: bool = False) -> bytes:
    """`compact_json.compact(model_view(...))`, the same bytes, with the thumbnails written from their
    tensor (`compact_json.rounded_grids`) instead of a Python float per weight: what the web page asks for.
    packed: every head's `weights` null and the thumbnails in `packed_weights` instead (`packed`):
    the same numbers in a third of the bytes for full maps (their lower triangle only: the rest is 0),
    read by the page without a number parsed per weight.

    >>> import json
    >>> json.loads(model_view_json(model, "I have a lot"))["heads"][0][0]["weights"][0]
    [1.0, 0.0, 0.0, 0.0]
    """
    if run is None:
        run = page_run(model, text, interventions)
    d = _model_view(run, explanation, THUMBNAIL_DECIMALS, weights=False).to_dict() | _view_fields(run)
    for layer in d["heads"]:
        for h in layer:
            h["weights"] = None  # a mark where the thumbnail goes: no other key of the view is "weights"
    if packed:
        packed_weights = compact_json.packed_thumbnails(thumbnails(run, THUMBNAIL_DECIMALS), THUMBNAIL_DECIMALS)
        return compact_json.compact(d | {"packed_weights": packed_weights})
    parts = compact_json.compact(d).split(b'"weights":null')
    grids = compact_json.rounded_grids(thumbnails(run, THUMBNAIL_DECIMALS).flatten(0, 1), THUMBNAIL_DECIMALS)  # layer by layer
    if len(parts) != len(grids) + 1:
        raise RuntimeError(f"{len(parts) - 1} thumbnail marks for {len(grids)} heads")
    out = [parts[0]]
    for grid, part in zip(grids, parts[1:]):
        out += [b'"weights":', grid, part]
    return b"".join(out)


def _view_fields(run) -> dict:
    """What the page's model view carries beside study.model_view's fields."""
    return run.interventions.silenced() | run.interventions.ablation_field() | {"decimals": THUMBNAIL_DECIMALS}


def head(model, text, layer: int, head: int, notation: str = "paper", rows="auto", keys="all",
         interventions: Interventions = Interventions(), run=None, packed: bool = False) -> dict:
    """One head (study_head.head_view) with what each answer contributes to each question.

    contributions[i][j] (paper; transposed in "columns") = w_ij · ‖v_j · W_O[h]‖, the size of
    member j's answer in question i's weighted sum as the head writes it. rows: "all" every
    question, "last" the last member's question only, "auto" all up to FULL_MAPS_MAX_T members,
    or [A, B] members A to B-1 (a Python slice: None leaves an end open, negatives count from the
    end). keys: "all" or [C, D], the answers shown. interventions: the head in a run with these;
    run: that run (page_run), whose recorded vectors are used where it has them.
    packed: the vectors (compact_json.PACKED_VECTORS) as `packed_vectors` instead (`compact_json.packed_vectors`).
    """
    T = len(checked_ids(model, text))
    chosen = "all" if rows == "all" or (rows == "auto" and T <= FULL_MAPS_MAX_T) else "last" if rows in ("auto", "last") else "window"
    as_slice = lambda w: slice(*w) if isinstance(w, (list, tuple)) else None  # noqa: E731
    view = head_view(model, text, layer, head, notation, interventions=interventions, run=run, rows=slice(-1, None) if chosen == "last" else as_slice(rows), keys=as_slice(keys))
    d = view.to_dict() | interventions.ablation_field()
    sizes, contributions = answer_contributions(model, view)
    d["answer_sizes"] = sizes.tolist()
    d["contributions"] = contributions.tolist()
    d["rows"] = chosen if chosen != "window" and view.keys_shown == [0, T] else "window"
    d["questions"] = list(range(*view.rows_shown))
    return compact_json.packed_vectors(d) if packed else d


def info(model, limits: dict | None = None) -> dict:
    """The model's shape, the server's limits and the text the page opens with, for the page's first request."""
    c = model.config
    return {"model": model_info(model).to_dict(), "context_length": c.context_length,
            "group_size": c.group_size, "notations": list(NOTATIONS), "limits": limits or {},
            "default_text": DEFAULT_TEXT}


def overview(run, layer: int, head: int, rows=None, keys=None, side: int = OVERVIEW_SIDE) -> dict:
    """study.overview of one head of `run`: its map pooled into at most side × side blocks."""
    return study_overview.overview(run, layer, head, rows, keys, side).to_dict()


def lesson(model, text, layer: int | None, head: int | None, query: int | None = None, key: int | None = None,
           interventions: Interventions = Interventions(), ranked: list[tuple[int, int]] = ()) -> dict:
    """The lesson's sections for one head; layer and head None: the first head of `ranked` (explain's
    order) not resting on a sink (study.lesson_sections.default_head)."""
    if layer is None:
        layer, head = default_head(model, text, list(ranked))
    return (lesson_sections(model, text, layer, head, query, key, interventions).to_dict()
            | interventions.ablation_field())


def why(model, text, layer: int, head: int, query: int, key: int,
        interventions: Interventions = Interventions()) -> dict:
    """study.why: why member `query` listens to member `key` in one head."""
    return study_why.why(model, text, layer, head, query, key, interventions).to_dict()


def lens(model, text, top: int = 3, rows: tuple | None = None, all_positions: bool = False) -> dict:
    """The logit lens of `text` (study.lens): rows [A, B] the members shown (lens_rows), else the
    last member, or with all_positions every member up to study.lens.DEFAULT_POSITIONS."""
    return study_lens.lens(model, text, top=top, positions=rows and slice(*rows), all_positions=all_positions).to_dict()


def lens_rows(rows: list | None, T: int) -> tuple | None:
    """The lens's rows [A, B] (a slice of a T-member text) as a key, checked as a head's window is
    (WindowError where empty, reversed or an end leaves the text), and InputError where they hold
    more members than the lens shows at once.

    >>> lens_rows([-64, None], 200), lens_rows(None, 5)
    ((-64, None), None)
    """
    if rows is None:
        return None
    n = len(members_in(T, slice(*rows), "rows"))  # WindowError where empty, reversed or past the text
    if n > study_lens.DEFAULT_POSITIONS:
        raise InputError(f"rows {rows} hold {n} members: the lens shows at most {study_lens.DEFAULT_POSITIONS} at "
                         "once; give a narrower [A, B]")
    return tuple(rows)


def patch(model, clean, corrupted, answer: str | None = None, wrong: str | None = None) -> dict:
    """Activation patching of `corrupted` from `clean` (study.patching)."""
    return patching.patch(model, clean, corrupted, answer=answer, wrong=wrong).to_dict()


def patch_members(model, clean, corrupted, answer: str | None = None, wrong: str | None = None) -> int:
    """The members of each of the two texts, checked as patching checks them before any pass (the
    same length, metric words of one token): InputError otherwise."""
    return len(patching.checked(model, clean, corrupted, answer, wrong)[0])


def patch_cost(model, T: int) -> dict:
    """What patching two T-member texts costs: its layer passes, and the sentence that says so."""
    return {"members": T, "layer_passes": patching.passes(model, T), "cost": patching.cost(model, T)}


def model_sha256(model) -> str:
    """SHA-256 of the file a loaded model was read from (a survey names the model by it)."""
    from studygroup.study.survey.survey import file_sha256, model_file

    return file_sha256(model_file(model))


def survey_marks(survey, model, sha256: str) -> dict:
    """The survey's marks for the page (each head's corpus roles), once the survey is checked to be
    of the model file whose SHA-256 is `sha256`: InputError where it is another model's."""
    from studygroup.study.survey.survey import check_surveyed, model_file

    check_surveyed(survey, sha256, model_file(model).name)
    return survey.marks()


def checked_survey(folder: str, model):
    """The finished survey in `folder` (`serve --survey`), checked to be of `model`'s file:
    InputError (one line) otherwise."""
    try:
        from studygroup.study.survey.survey import check_surveyed, load_survey, model_file
    except ImportError:
        raise InputError("--survey reads Parquet files: pip install 'studygroup[survey]' (pyarrow)") from None
    s = load_survey(folder)
    check_surveyed(s, model_sha256(model), model_file(model).name)
    return s


def report_data(model, text, text_a=None, top: int = 10, heads: int = REPORT_HEADS, explained=None) -> dict:
    """Everything a self-contained report shows for one text (and optionally a comparison).

    The explanation (`explained`: one already computed for `text`, reused), the model view, and the
    `heads` most decisive heads whole in both notations.

    >>> from studygroup.views.report import write_report
    >>> write_report(report_data(model, "I have a lot"), "r.html")
    PosixPath('r.html')
    """
    e = explained if explained is not None else explanation(model, text, top)
    data = {"kind": "report", "text": text, "explanation": e.to_dict(), "model_view": model_view(model, text, e),
            "conclusion": conclusion(model, text, top), "heads": {}}
    if text_a is not None:
        data["comparison"] = comparison(model, text_a, text, top).to_dict()
    for h in e.heads[:heads]:
        data["heads"][f"{h.layer}.{h.head}"] = {n: head(model, text, h.layer, h.head, n) for n in NOTATIONS}
    return data
