"""The DR tests' Kubernetes: the shared API emulator with the DR resources, plus the
simulated Velero and Deployment controller (:mod:`gotthard_testing.velero_sim`, NOT
Velero) over it."""

from __future__ import annotations

from kubernetes import client

from gotthard_testing.kubeapi import Resource, sandbox_resources
from gotthard_testing.velero_sim import SimulatedVelero


def dr_resources() -> list[Resource]:
    """What the DR code reads and writes: the Velero and Karmada CRDs, the workloads a
    backup holds (Deployments, Pods, ...) and the Lease, on one emulated API server."""
    karmada = [r for r in sandbox_resources("karmada") if r.key.startswith("policy.karmada.io/")]
    return [*sandbox_resources("kubernetes"), *karmada]


class SimulatedVeleroController(SimulatedVelero):
    """The simulated Velero over one cluster, its backups kept in memory; its Deployment
    controller makes restored Deployments ready after *ready_delay* seconds.

    ``outcome(kind, name)`` chooses the terminal phase: ``Completed`` (default),
    ``PartiallyFailed``, ``Failed``, ``FailedValidation`` or ``stuck`` (InProgress forever).
    """

    def __init__(
        self, api: client.ApiClient, namespace: str = "velero", ready_delay: float = 0.0
    ) -> None:
        super().__init__({"cluster": api}, namespace=namespace, ready_delay=ready_delay)
