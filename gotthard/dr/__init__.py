"""Placeholder for the dr area; see the open issues."""
