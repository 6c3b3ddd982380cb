"""Grafana dashboards as code, their offline lint and a live check against Prometheus;
the Prometheus rules and the Alertmanager configuration.

* :mod:`gotthard.dashboards.grafana`: build and write the dashboards (the entry point);
  :mod:`~gotthard.dashboards.panels` holds the query and panel helpers,
  :mod:`~gotthard.dashboards.boards` one module per dashboard, and
  :mod:`~gotthard.dashboards.schema` turns grafanalib's output into JSON that current
  Grafana imports without migrations.
* :mod:`gotthard.dashboards.lint`: offline rules (datasource variable, site/cluster
  filter, ``$__rate_interval``, units, panel types, uids, panel ids, titles).
* :mod:`gotthard.dashboards.check`: every panel query sent to a real Prometheus.
* :mod:`gotthard.dashboards.cli`: ``gotthard dashboards build|lint|check``.
* :mod:`gotthard.dashboards.rules`: render the recording rules
  (:mod:`~gotthard.dashboards.recording_rules`) and alerts
  (:mod:`~gotthard.dashboards.alert_rules`); thresholds in
  :mod:`~gotthard.dashboards.thresholds`; ``gotthard rules build`` in
  :mod:`~gotthard.dashboards.rules_cli`, with :mod:`~gotthard.dashboards.alertmanager`.

See docs/dashboards.md and docs/alerts.md.
"""
