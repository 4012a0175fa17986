"""The run layer: what a run is (RunSpec, resolved in one place) and the one place a run is built (execute)."""

from .execute import execute
from .spec import AutoAnswers, RunSpec, SpecError, resolve

__all__ = ["AutoAnswers", "RunSpec", "SpecError", "execute", "resolve"]
