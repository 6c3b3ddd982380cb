"""Alert thresholds: module constants so that the rules, the dashboards' colours, the unit
tests and docs/alerts.md agree."""

from __future__ import annotations

from gotthard.slurm_state import UNAVAILABLE_EFFECTIVE_STATES

#: node states that make a node unavailable to the scheduler (slurm_nodes{state}), as the
#: exporter's backends, the runbook webhook and the sandbox judge them
SLURM_UNAVAILABLE_STATES = UNAVAILABLE_EFFECTIVE_STATES
SLURM_UNAVAILABLE_RATIO = 0.10
SLURM_PENDING_RESOURCES_JOBS = 100
SLURM_SCHEDULER_CYCLE_SECONDS = 2.0

#: XIDs that page (the GPU is lost, or XID 48/79/94/95). The exporter's gpu_health also
#: turns 0 on the other fatal XIDs (64, 74, 92, 119, 120, 140): GPUUnhealthy covers them.
GPU_PAGING_XIDS = (48, 79, 94, 95)
GPU_THERMAL_THROTTLE_RATIO = 0.20
GPU_POWER_THROTTLE_RATIO = 0.50
GPU_IDLE_UTILIZATION = 0.05

#: HPE cxi_healthcheck link_flap_check: fewer restarts than these is healthy.
SLINGSHOT_FLAPS_1H = 5
SLINGSHOT_FLAPS_10H = 10
#: corrected-codeword BER as cxi_stat -r computes it (codeword rate / link bit rate)
SLINGSHOT_CORRECTED_BER = 1e-6
#: retransmission (SPT) timeouts per second on one NIC
SLINGSHOT_SPT_TIMEOUTS_PER_SECOND = 1.0

LUSTRE_OST_FILL_WARNING = 0.85
LUSTRE_OST_FILL_CRITICAL = 0.90
LUSTRE_OST_FILL_SPREAD = 0.20
LUSTRE_MDT_LATENCY_SECONDS = 0.05
#: a target still in recovery after this long is stuck (the default hard recovery window
#: of 2.12+ is 900 s; sites raise it for big client counts, rarely past 30 minutes)
LUSTRE_RECOVERY_STUCK_FOR = "30m"
#: clients evicted from one target within 10 minutes: a network or client-side storm
LUSTRE_EVICTIONS_10M = 10
#: LNet messages dropped per second on one node
LUSTRE_LNET_DROPS_PER_SECOND = 1.0

#: backups run daily: a last success older than a day plus two hours of slack is late
DR_BACKUP_MAX_AGE_SECONDS = 26 * 3600
DR_RTO_TARGET_SECONDS = 3600
