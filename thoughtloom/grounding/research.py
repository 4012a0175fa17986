"""Old import path of the knowledge check (`knowledge_check.py`), kept because docs/python.md documented it."""

from .knowledge_check import ResearchGrounder

__all__ = ["ResearchGrounder"]
