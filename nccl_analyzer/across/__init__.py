"""Across runs: compare a good run with a bad one (``diff``) and triage many jobs (``fleet``)."""
