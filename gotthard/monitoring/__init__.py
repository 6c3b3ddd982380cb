"""Monitoring as code: Prometheus rules, Grafana dashboards, the Alertmanager configuration,
runbook pages, and their delivery formats.

The package is split by product into layers; a module imports only from its own layer
or those above it in this list, never from a later one (tests/test_structure.py checks
it, function-level imports included):

1. base: :mod:`~gotthard.monitoring.thresholds` (tunable thresholds),
   :mod:`~gotthard.monitoring.rule_model` (what a rule is),
   :mod:`~gotthard.monitoring.shared` (selectors, join keys, dashboard names and uids),
   :mod:`~gotthard.monitoring.documents` (deterministic YAML, writing files);
2. components: :mod:`gotthard.monitoring.components`, one module per area of the
   registry (:data:`gotthard.areas.AREAS`) with its thresholds, recording rules and
   alerts; :mod:`~gotthard.monitoring.settings`, the site's ``[monitoring]`` tuning of
   them;
3. rules: :mod:`~gotthard.monitoring.rules` renders them, :mod:`~gotthard.monitoring.dcgm`
   maps dcgm-exporter's metrics;
4. dashboards: :mod:`gotthard.monitoring.dashboards` (panels, boards, schema, build,
   lint, live check);
5. Alertmanager: :mod:`~gotthard.monitoring.alertmanager`;
6. runbook pages: :mod:`~gotthard.monitoring.runbook_pages`, from the templates in
   ``runbooks/``;
7. delivery: :mod:`~gotthard.monitoring.deliver`, the formats sites load;
8. commands: ``gotthard dashboards`` (:mod:`~gotthard.monitoring.cli`), ``gotthard
   rules`` and ``gotthard alertmanager`` (:mod:`~gotthard.monitoring.rules_cli`,
   :mod:`~gotthard.monitoring.thresholds_cli`), with
   :mod:`~gotthard.monitoring.cli_common` (with :mod:`gotthard.cli_common`, shared by every area).

See docs/dashboards.md and docs/alerts.md.
"""
