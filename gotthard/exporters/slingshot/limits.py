"""HPE ``cxi_healthcheck`` link_flap_check limits: a link is healthy with fewer restarts
than these in the last hour and the last ten hours.

One definition for the exporter's ``gotthard_slingshot_link_healthy`` (its configuration's
defaults) and the SlingshotLinkFlapping alert's default thresholds. Kept free of imports
so that both the node exporter and the monitoring rules load it for nothing.
"""

from __future__ import annotations

MAX_RESTARTS_1H = 5
MAX_RESTARTS_10H = 10
