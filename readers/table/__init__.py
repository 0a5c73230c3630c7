"""The table Reader: CSV/TSV/XLSX with exact operations over all rows."""
