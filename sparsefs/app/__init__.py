"""Composition and surfaces: the daemon, the CLI, sparsefs read, the API, MCP, index, reports."""
