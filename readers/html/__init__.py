"""The HTML Reader: main text without boilerplate."""
