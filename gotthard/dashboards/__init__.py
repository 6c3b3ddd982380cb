"""Grafana dashboards as code, their offline lint and a live check against Prometheus.

* :mod:`gotthard.dashboards.grafana`: the dashboards, built with grafanalib and
  post-processed into JSON that current Grafana imports without migrations.
* :mod:`gotthard.dashboards.lint`: offline rules (datasource variable, site/cluster
  filter, ``$__rate_interval``, units, panel types, uids, panel ids, titles).
* :mod:`gotthard.dashboards.check`: every panel query sent to a real Prometheus.
* :mod:`gotthard.dashboards.cli`: ``gotthard dashboards build|lint|check``.

See docs/dashboards.md.
"""
