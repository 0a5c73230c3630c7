"""The log Reader: entries by time, level and pattern."""
