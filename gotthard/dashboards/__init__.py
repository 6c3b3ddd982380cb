"""Placeholder for the dashboards area; see the open issues."""
