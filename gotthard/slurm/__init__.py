"""The one Slurm reader (shared plumbing): the exporter's Slurm collector, the runbook
actions and the sandbox read Slurm through it.

* :mod:`.snapshot`: the typed models (nodes, jobs, partitions, reservations, the
  scheduler's statistics, controllers) and the snapshot of one poll;
* :mod:`.fields`: the one table of the fields Gotthard reads, with how each backend gets
  each one (a ``sinfo``/``squeue`` column, slurmrestd keys per OpenAPI version, a pyslurm
  attribute), and the builders of the models;
* :mod:`.values`: how each source spells a value (text, JSON, pyslurm objects);
* :mod:`.text`: the argv of the narrow commands and the pure parsers of their output
  (the one ``sinfo`` parser);
* the backends: :mod:`.cli` (the commands, through :mod:`gotthard.command`), :mod:`.rest`
  with :mod:`.rest_json` (slurmrestd), :mod:`.pyslurm_backend` (pyslurm 25.11).

Node states and what "unavailable" means are :mod:`gotthard.slurm_state`'s.
"""
