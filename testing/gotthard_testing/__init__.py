"""Gotthard's test doubles (the ``gotthard-testing`` distribution, never the product's):

* :mod:`.kubeapi`: an emulated Kubernetes API server, NOT kube-apiserver;
* :mod:`.velero_sim`: a simulated Velero and the simulated Deployment controller of the
  emulated clusters (:mod:`.controllers`), NOT Velero and NOT kube-controller-manager;
* :mod:`.resources`: what the emulator serves and the API server's rules per kind
  (validation, status); :mod:`.selectors`: label selectors;
* ``crds/``: the Velero and Karmada CRDs the emulator serves.

Nothing is imported here: ``python -m gotthard_testing.kubeapi`` stays fast.
"""

__version__ = "0.1.0"
