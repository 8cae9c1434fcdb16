"""Training: loaders for the bundled real data sets, a vocabulary that travels with the weights,
grouped seeded splits, TF-IDF baselines, and one recipe-driven trainer (DDP-ready).

Nothing in the core imports this package; ``attnzoo train`` and ``attnzoo predict`` do.
"""
