"""The package's version: its one source (pyproject.toml reads it; `thoughtloom.__version__` re-exports it).

A module of its own, importing nothing, so that any layer can read the version without importing the
package's top level.
"""

__version__ = "0.1.0"
