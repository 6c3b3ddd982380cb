"""DR control plane: Velero backups, drills with RTO/RPO, Zurich/Lugano placement."""
