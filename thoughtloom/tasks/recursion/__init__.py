"""What the recursive strategy asks of a task: goals, plans under recomposition contracts, checks."""

from .contract import SPEC_TYPES, ChildSpec, Contract, ContractError, FailurePolicy, check_contract, parse_contract
from .hooks import Goal, Plan, RecursiveHooks, Verification

__all__ = [
    "SPEC_TYPES", "ChildSpec", "Contract", "ContractError", "FailurePolicy", "Goal", "Plan", "RecursiveHooks",
    "Verification", "check_contract", "parse_contract",
]
