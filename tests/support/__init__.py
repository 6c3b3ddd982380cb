"""Helpers shared by the whole test tree.

* :mod:`tests.support.kube`: the emulated Kubernetes API (``gotthard_testing``, testing/)
  over real HTTP, its fixture and the recording of the API calls;
* :mod:`tests.support.cli`: ``gotthard`` in a child process or in this process;
* :mod:`tests.support.golden`: golden-file assertions (``GOTTHARD_UPDATE_GOLDEN=1`` rewrites);
* :mod:`tests.support.monitoring`: real Prometheus and Alertmanager processes, webhook
  receivers and query helpers;
* :mod:`tests.support.wait`: polling until a condition holds;
* :mod:`tests.support.threads`: calling functions in several threads at once;
* :mod:`tests.support.tls`: openssl certificates, web config files, basic auth headers.

The fixtures of these modules are registered for every test by ``tests/conftest.py``.
"""
