"""Error types. Each is raised where the bad value enters, with a message a user can act on."""


class StudyGroupError(Exception):
    """Base of every error studygroup raises on purpose (the CLI prints it as one line).

    Its message is one line whatever it quotes (a damaged file's key may hold newlines):

    >>> str(StudyGroupError("metadata key 'a\\nb' is damaged"))
    "metadata key 'a\\\\nb' is damaged"
    """

    def __str__(self) -> str:
        return super().__str__().replace("\r", "\\r").replace("\n", "\\n")


class NotationError(StudyGroupError, ValueError):
    """A formula was given matrices whose shapes or values do not fit its notation."""


class ModelFileError(StudyGroupError):
    """A model file is missing, unreadable, not GGUF, truncated, or of an unsupported kind."""


class InputError(StudyGroupError, ValueError):
    """Text, token ids, a layer or a head that the model cannot take."""


class WindowError(InputError):
    """A window of a head's grid (studygroup.study.window) that is empty, reversed, out of range or
    too large. Its message is a template with {rows} and {keys} where the parameters are named;
    str() spells them as in Python, `spelled` as another caller does (the CLI, the web API).

    >>> e = WindowError("choose {rows}")
    >>> str(e), e.spelled({"rows": "--rows A:B", "keys": "--keys C:D"})
    ('choose rows=slice(A, B)', 'choose --rows A:B')
    """

    #: How Python spells the two parameters: str()'s spelling.
    PYTHON = {"rows": "rows=slice(A, B)", "keys": "keys=slice(C, D)"}

    def __init__(self, template: str):
        super().__init__(template)
        self.template = template

    def spelled(self, names: dict[str, str]) -> str:
        return " ".join(self.template.format(**names).split())

    def __str__(self) -> str:
        return self.spelled(self.PYTHON)
