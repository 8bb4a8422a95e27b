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
