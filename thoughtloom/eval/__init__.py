"""The evaluation harness: fair, reproducible comparisons of reasoning methods (`loom bench`).

lanes (methods) -> protocol (frozen manifest + parity audit) -> runner (streamed, resumable)
-> report (table, JSON, CSV, plot). Imports are lazy so `import thoughtloom.eval` stays light.
"""

from __future__ import annotations

from typing import Any

__all__ = ["audit", "build_protocol", "compare_strategies", "load_dataset", "run_protocol"]

_WHERE = {
    "compare_strategies": ".runner", "build_protocol": ".runner", "run_protocol": ".runner",
    "audit": ".protocol", "load_dataset": ".datasets",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module 'thoughtloom.eval' has no attribute {name!r}")
