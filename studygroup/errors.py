"""Error types. Each is raised where the bad value enters, with a message a user can act on."""


class StudyGroupError(Exception):
    """Base of every error studygroup raises on purpose (the CLI prints it as one line)."""


class NotationError(StudyGroupError, ValueError):
    """A formula was given matrices whose shapes or values do not fit its notation."""


class ModelFileError(StudyGroupError):
    """A model file is missing, unreadable, not GGUF, truncated, or of an unsupported kind."""


class InputError(StudyGroupError, ValueError):
    """Text, token ids, a layer or a head that the model cannot take."""
