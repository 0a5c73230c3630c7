"""What several Reader families share: line anchors and bounded lines, record operations."""
