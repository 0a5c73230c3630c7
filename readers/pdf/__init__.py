"""The PDF Reader (pymupdf): page-anchored text, headings, tables."""
