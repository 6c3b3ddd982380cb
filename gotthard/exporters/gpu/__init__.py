"""GPU exporter: NVML collector and PID/device to Slurm job and Kubernetes pod attribution."""
