"""Job efficiency: one report per Slurm job from the site's Prometheus (and Slurm), the
compact summary stored in the job's AdminComment when it ends, and a digest of the
findings by account. The queries are the Job dashboard's
(:mod:`gotthard.monitoring.components.job`). See docs/job.md."""
