"""Attention building blocks: plain torch modules, one family per file, one mask convention (True = attend).

Nothing here imports the registry, the CLI or the plugins; the registry reaches these classes only
through the factory strings of the model cards.
"""
