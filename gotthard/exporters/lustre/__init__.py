"""The ``lustre`` collector: capacity, operation and job statistics from procfs/sysfs or lctl."""
