"""Shipped Rego policies, site data and policy test tables (package data)."""
