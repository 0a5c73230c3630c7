"""The Read Intent Protocol (paper, Algorithm 1): grammar, intents, episodes, actions, packs."""
