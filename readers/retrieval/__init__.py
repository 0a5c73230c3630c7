"""Location methods shared by the Readers: segmentation, BM25, dense re-ranking."""
