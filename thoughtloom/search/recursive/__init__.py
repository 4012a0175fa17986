"""Recursive decomposition with recomposition contracts: the solver (the task's side is tasks.recursion)."""

from .solver import Outcome, Solver, branch_score

__all__ = ["Outcome", "Solver", "branch_score"]
