"""The dashboards, one module per area.

Each module builds its area's dashboard from :mod:`gotthard.monitoring.dashboards.panels`
(imported as ``ui``) at the threshold values it is given, reads its component's recorded
series (:mod:`gotthard.monitoring.components`), and holds the queries other dashboards
reuse (the site overview shows a stat row per area):

* :mod:`.overview`: Zurich and Lugano side by side, firing alerts;
* :mod:`.slurm`, :mod:`.gpu`, :mod:`.slingshot`, :mod:`.lustre`: the HPC components;
* :mod:`.dr`: backups, drills and placement; :mod:`.security`: CIS and policies;
* :mod:`.exporter`: Gotthard's own exporters.
"""
