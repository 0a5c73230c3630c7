"""Artifacts: fingerprints and parses cached per version, bounded parsing, dense warm-up."""
