"""The libfuse3 backend through mfusepy (the fusepy API): the fallback everywhere else."""
