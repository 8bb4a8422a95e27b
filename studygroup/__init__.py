"""studygroup: the attention layer of a real language model, as a study group you can question."""
from studygroup.errors import InputError, ModelFileError, NotationError, StudyGroupError

__all__ = ["InputError", "ModelFileError", "NotationError", "StudyGroupError"]
