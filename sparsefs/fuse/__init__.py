"""FUSE backends: the kernel protocol with passthrough, and libfuse through mfusepy."""
