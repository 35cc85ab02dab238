"""Incident analysis: deterministic comparisons of an incident window against its baseline."""
