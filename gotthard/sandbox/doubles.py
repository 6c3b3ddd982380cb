"""The test doubles the two-site sandbox runs in place of software that cannot run here:
an emulated Kubernetes API server per site and for Karmada, a simulated Velero with the
clusters' simulated Deployment controller, and a simulated pager, ticket system and dead
man's switch that records what Alertmanager notifies. NOT Kubernetes, NOT Velero, NOT a
pager.

They are not part of this distribution: the ``gotthard-testing`` distribution
(``testing/`` in the source tree, installed by ``make venv``) ships them, and the sandbox
starts them as processes of its modules. The single-site sandbox needs none of them.
"""

from __future__ import annotations

import importlib.util

__all__ = ["INSTALL", "KUBEAPI", "NOTIFICATIONS", "PACKAGE", "VELERO_SIM", "missing"]

#: The import package of the ``gotthard-testing`` distribution.
PACKAGE = "gotthard_testing"
#: ``python -m`` of an emulated API server, and of the simulated Velero.
KUBEAPI = f"{PACKAGE}.kubeapi"
VELERO_SIM = f"{PACKAGE}.velero_sim"
#: ``python -m`` of the simulated pager, ticket system and dead man's switch.
NOTIFICATIONS = f"{PACKAGE}.notifications"
#: How to install them, from the source tree.
INSTALL = "pip install -e ./testing"


def missing() -> str:
    """Why the doubles cannot run (one line), or ``""`` when they are installed."""
    if importlib.util.find_spec(PACKAGE) is not None:
        return ""
    return (
        "the emulated Kubernetes API and the simulated Velero of the multi-site sandbox "
        f"are not installed (the gotthard-testing distribution): {INSTALL} "
        "(make venv installs it)"
    )
