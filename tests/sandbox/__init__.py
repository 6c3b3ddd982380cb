"""Tests of the two-site sandbox and its simulated parts."""
