"""The source tree: confined access through a directory fd, the collection walk, freshness."""
