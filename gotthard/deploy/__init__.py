"""Deploying Gotthard at a site, and the one generator of its runtime files.

``gotthard deploy render --target kubernetes|systemd|prometheus|thanos|local --out DIR``
lays out every role (:mod:`gotthard.deploy.roles`) from the site model and ``[deploy]``
(:mod:`gotthard.deploy.settings`). Every Prometheus configuration comes from
:mod:`.prometheus`, ``alertmanager.yml`` and the Alertmanager cluster flags from
:mod:`.alerting`, the addresses from :mod:`.topology`, and each role's command line from
:func:`gotthard.deploy.roles.command`; ``--target local`` (:mod:`.local`) is what the
sandbox starts. The rules, ``alertmanager.yml`` and the global view's selection need
:mod:`gotthard.monitoring` (the ``dashboards`` extra for the dashboards).
"""
