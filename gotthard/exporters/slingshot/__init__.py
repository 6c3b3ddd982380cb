"""The ``slingshot`` collector: HPE Slingshot (Cassini/CXI) NIC health and counters from sysfs."""
