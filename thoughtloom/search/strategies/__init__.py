"""Search strategies: each decides which nodes to work on next over the same graph and operators.

Each is declared in its own module (a `STRATEGIES` tuple of `Strategy` objects, base.py) and found by
name through registry.py, which also finds those installed packages add.
"""
