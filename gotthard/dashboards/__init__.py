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
* :mod:`gotthard.dashboards.components`: one module per area (Slurm, GPU, Slingshot,
  Lustre, DR, security, Gotthard itself) with its thresholds, recording rules and alerts;
  :mod:`~gotthard.dashboards.shared` holds the selectors, join keys and dashboard uids
  that rules and dashboards share; :mod:`~gotthard.dashboards.settings` the site's
  ``[monitoring]`` tuning.
* :mod:`gotthard.dashboards.rules`: render the rules; ``gotthard rules build`` in
  :mod:`~gotthard.dashboards.rules_cli`, with :mod:`~gotthard.dashboards.alertmanager`;
  ``gotthard rules thresholds`` in :mod:`~gotthard.dashboards.thresholds_cli`; the
  runbook pages in :mod:`~gotthard.dashboards.runbook_pages`.

See docs/dashboards.md and docs/alerts.md.
"""
