"""Gotthard: observability and SRE control plane for hybrid Slurm/Kubernetes sites."""

# The one place the version is written; pyproject.toml reads it from here. A literal,
# not importlib.metadata: every `gotthard` process imports this module, and reading the
# installed distribution's metadata costs a node exporter tens of milliseconds.
__version__ = "0.1.0"

__all__ = ["__version__"]
