"""The core: names to specs to built, placed modules.

``spec`` and ``record`` (plain data), ``cards`` (YAML cards to specs), ``resources`` (where the built-in
cards and weights live), ``hookspecs`` and ``plugins`` (the pluggy host), ``registry`` (the one name
table), ``config`` (merging and checking a config against the factory), ``signatures`` (what a factory
takes), ``create`` (``create``, ``load``), ``children`` (attnzoo's Python child processes, cut off from the
caller's folder). It imports ``attnzoo.errors`` and ``attnzoo.io`` only, and reaches ``layers/`` and
``models/`` through the cards' factory strings at ``create()`` time. Importing it does not import torch.
"""
