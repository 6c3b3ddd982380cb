"""The fatal XIDs: one list for the GPU exporter's health and the GPU alerts.

After one of these XIDs a GPU needs a reset or the node a reboot (NVIDIA's XID
catalogue: 48 double-bit ECC, 64 row-remap failure, 74 NVLink, 79 fallen off the bus,
92 high single-bit ECC rate, 94/95 contained/uncontained ECC, 119/120 GSP, 140 ECC
unrecovered). Stdlib only: the alert rules import it without the exporter's NVML.
"""

from __future__ import annotations

#: XIDs after which a GPU needs a reset or a reboot.
FATAL_XIDS: frozenset[int] = frozenset({48, 64, 74, 79, 92, 94, 95, 119, 120, 140})
