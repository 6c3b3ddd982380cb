"""Deploying Gotthard at a site: Kubernetes manifests, systemd units, scrape configs.

``gotthard deploy render --target kubernetes|systemd|prometheus --out DIR`` lays out
every role (:mod:`gotthard.deploy.roles`) from the site model and ``[deploy]``
(:mod:`gotthard.deploy.settings`). This package imports pydantic and PyYAML only.
"""
