"""The research mode's engine (Research Flow): a tree of hypotheses tested against evidence, pruned and merged."""

from .config import ANTI_PATTERNS, ResearchConfig, ResearchConfigError
from .explorer import ResearchFlow, ResearchSetup, run_research
from .flow import DIRECTIONS, FlowMachine, FlowState, IllegalFlowTransition, Transition
from .records import (
    Evidence,
    Hypothesis,
    HypothesisStatus,
    Insight,
    ResearchResult,
    ResearchStats,
    Synthesis,
)
from .roles import BranchRequest, ResearchRoles, RoleError

__all__ = [
    "ANTI_PATTERNS", "DIRECTIONS", "BranchRequest", "Evidence", "FlowMachine", "FlowState", "Hypothesis",
    "HypothesisStatus", "IllegalFlowTransition", "Insight", "ResearchConfig", "ResearchConfigError", "ResearchFlow",
    "ResearchResult", "ResearchRoles", "ResearchSetup", "ResearchStats", "RoleError", "Synthesis", "Transition",
    "run_research",
]
