"""The simulated Deployment controller of the emulated clusters: NOT kube-controller-manager,
and no kubelet runs anything.

On a real cluster a Deployment becomes Ready because its controller creates the Pods, the
kubelets run them, and the controller writes the Deployment's ``status`` through the
``/status`` subresource (the only way to write it: the API server drops status given on
create or on an update of the Deployment). The emulated API server runs nothing, so
:class:`DeploymentController` stands in for all of them: it writes, through ``/status``,
the status of a Deployment whose pods are all ready (``replicas``, ``updatedReplicas``,
``readyReplicas`` and ``availableReplicas`` = ``spec.replicas``; ``observedGeneration``;
condition ``Available``), without creating any Pod.

It does so at once, except for a Deployment that Velero restored (labelled
``velero.io/restore-name``, as Velero labels what it restores): that one turns ready
*ready_delay* seconds after the controller first saw it, like a slow restore whose pods
take their time to pull images and pass their readiness probes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from gotthard_testing.selectors import labels_of

__all__ = ["RESTORE_LABEL", "DeploymentController", "ready_status"]

#: The label Velero puts on every object it restores (its value: the Restore's name).
RESTORE_LABEL = "velero.io/restore-name"
#: The status fields that say whether a Deployment is ready (conditions aside).
_READINESS = ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas")


def ready_status(replicas: int, generation: int) -> dict[str, Any]:
    """The status the Deployment controller reports once all *replicas* are ready."""
    available = {
        "type": "Available",
        "status": "True",
        "reason": "MinimumReplicasAvailable",
        "message": "Deployment has minimum availability.",
    }
    counts = dict.fromkeys(("replicas", "updatedReplicas", "readyReplicas"), replicas)
    return {
        "observedGeneration": generation,
        **counts,
        "availableReplicas": replicas,
        "conditions": [available],
    }


class DeploymentController:
    """Makes the Deployments of *clusters* (name -> client) ready; see the module
    docstring. :meth:`tick` is one pass over every cluster."""

    def __init__(
        self,
        clusters: Mapping[str, client.ApiClient],
        ready_delay: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.apps = {name: client.AppsV1Api(api) for name, api in clusters.items()}
        self.ready_delay = ready_delay
        self.clock = clock
        #: (cluster, uid) -> when a restored Deployment was first seen.
        self._seen: dict[tuple[str, str], float] = {}

    def tick(self) -> None:
        for name, apps in self.apps.items():
            answer = apps.list_deployment_for_all_namespaces(_preload_content=False)
            for deployment in json.loads(answer.data)["items"]:
                self._reconcile(name, apps, deployment)

    def _due(self, cluster: str, deployment: Mapping[str, Any]) -> bool:
        """Whether *deployment* may be ready now (a restored one: after the delay)."""
        if RESTORE_LABEL not in labels_of(deployment) or self.ready_delay <= 0:
            return True
        key = (cluster, str(deployment["metadata"].get("uid", "")))
        first = self._seen.setdefault(key, self.clock())
        return self.clock() - first >= self.ready_delay

    def _reconcile(self, cluster: str, apps: client.AppsV1Api, deployment: dict[str, Any]) -> None:
        meta = deployment["metadata"]
        replicas = int((deployment.get("spec") or {}).get("replicas", 1))
        wanted = ready_status(replicas, int(meta.get("generation", 1)))
        current = deployment.get("status") or {}
        if all(current.get(key) == wanted[key] for key in _READINESS):
            return
        if self._due(cluster, deployment):
            body = {"status": wanted}
            apps.patch_namespaced_deployment_status(meta["name"], meta["namespace"], body)
