"""The questions people ask of a run: explain, compare, head, model view, lesson, story; attribution and effects."""

#: The article's sentence: the text every question is asked of when none is given (the CLI, the page).
DEFAULT_TEXT = "Cash or credit card? I have a lot"
