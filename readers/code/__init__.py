"""The code Reader: a symbol index over source files."""
