"""The questions people ask of a run: explain, compare, head, model view, lesson, story; attribution and effects."""
