"""The search: configuration, engine, operators, strategies and the event stream."""

from .config import SearchConfig
from .engine import search
from .result import PathStep, SearchResult

__all__ = ["PathStep", "SearchConfig", "SearchResult", "search"]
