"""The package version: its one source (pyproject.toml reads it at build time)."""

__version__ = "0.1.0"
