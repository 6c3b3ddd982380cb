"""Placeholder for the policies area; see the open issues."""
