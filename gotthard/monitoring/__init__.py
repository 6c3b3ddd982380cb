"""Grafana dashboards as code, their offline lint and a live check against Prometheus;
the Prometheus rules and the Alertmanager configuration.

* :mod:`gotthard.monitoring.grafana`: build and write the dashboards (the entry point);
  :mod:`~gotthard.monitoring.panels` holds the query and panel helpers,
  :mod:`~gotthard.monitoring.boards` one module per dashboard, and
  :mod:`~gotthard.monitoring.schema` turns grafanalib's output into JSON that current
  Grafana imports without migrations.
* :mod:`gotthard.monitoring.lint`: offline rules (datasource variable, site/cluster
  filter, ``$__rate_interval``, units, panel types, uids, panel ids, titles).
* :mod:`gotthard.monitoring.check`: every panel query sent to a real Prometheus.
* :mod:`gotthard.monitoring.cli`: ``gotthard dashboards build|lint|check``.
* :mod:`gotthard.monitoring.components`: one module per area (Slurm, GPU, Slingshot,
  Lustre, DR, security, Gotthard itself) with its thresholds, recording rules and alerts;
  :mod:`~gotthard.monitoring.shared` holds the selectors, join keys and dashboard uids
  that rules and dashboards share; :mod:`~gotthard.monitoring.settings` the site's
  ``[monitoring]`` tuning.
* :mod:`gotthard.monitoring.rules`: render the rules; ``gotthard rules build`` in
  :mod:`~gotthard.monitoring.rules_cli`, with :mod:`~gotthard.monitoring.alertmanager`;
  ``gotthard rules thresholds`` in :mod:`~gotthard.monitoring.thresholds_cli`; the
  runbook pages in :mod:`~gotthard.monitoring.runbook_pages`.

See docs/dashboards.md and docs/alerts.md.
"""
