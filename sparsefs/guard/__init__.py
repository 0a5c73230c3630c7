"""The guard: steer an unmodified agent from broad plain reads to sparse reading."""
