"""Persistence: protocol state, the parsed-artifact store, the safe codec, the pack log."""
