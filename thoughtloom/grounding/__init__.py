"""Grounding: testing thoughts against reality (a sandbox for code, a failing test for fixes,
a document index for claims) and turning what was found into score adjustments.

Only the light vocabulary is exported here; the sandbox and grounders live in their modules
(`sandbox`, `code`, `debugging`, `knowledge_check`) and are imported where they are used.
"""

from .policy import GroundingPolicy
from .types import Citation, Grounder, GroundingResult, Thought, not_grounded

__all__ = ["Citation", "Grounder", "GroundingPolicy", "GroundingResult", "Thought", "not_grounded"]
