"""The JSON and JSONL Readers: shape, key paths, JSONPath, record operations."""
