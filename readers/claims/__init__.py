"""Verify: supporting and contradicting passages for a claim, by number and stance."""
