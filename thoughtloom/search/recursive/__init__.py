"""Recursive decomposition with recomposition contracts (seed 002, ToT-Gen): contracts, hooks, solver."""

from .contract import SPEC_TYPES, ChildSpec, Contract, ContractError, FailurePolicy, check_contract, parse_contract
from .hooks import Goal, Plan, RecursiveHooks, Verification
from .solver import Outcome, Solver, branch_score

__all__ = [
    "SPEC_TYPES", "ChildSpec", "Contract", "ContractError", "FailurePolicy", "Goal", "Outcome", "Plan",
    "RecursiveHooks", "Solver", "Verification", "branch_score", "check_contract", "parse_contract",
]
