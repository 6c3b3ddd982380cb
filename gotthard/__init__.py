"""Gotthard: observability and SRE control plane for hybrid Slurm/Kubernetes sites."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gotthard")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
