"""Alert-driven runbooks: an Alertmanager webhook that runs safe, audited actions.

``gotthard runbooks serve`` takes Alertmanager webhook payloads (version 4) on
``POST /alerts``, looks each alert up in the runbook registry (:mod:`.registry`) and plans
or runs its steps (:mod:`.actions`) under the safety rules of :mod:`.engine`: dry-run by
default, idempotency per (fingerprint, startsAt), rate and blast-radius limits, a kill
switch, a node put back only on a repair that Prometheus confirms (:mod:`.repair`), and
a JSONL audit record of every decision. See docs/runbooks.md.
"""
