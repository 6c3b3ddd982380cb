"""The Grafana dashboards: built with grafanalib, linted offline, checked live.

* :mod:`.build`: every dashboard (:data:`gotthard.areas.DASHBOARDS`) as current Grafana
  JSON;
* :mod:`.panels`: the query and panel helpers; :mod:`.boards`: one module per dashboard;
  :mod:`.schema`: grafanalib's output rewritten into the JSON current Grafana stores;
* :mod:`.lint`: offline rules; :mod:`.check`: every panel query sent to a real Prometheus.

:mod:`.lint` and :mod:`.check` read dashboard JSON and need no grafanalib; this package
imports nothing itself, so they load without it.
"""
