"""Tools over the whole library: ``bench`` (the measurement behind ``attnzoo bench``) and ``catalogue``
(docs/catalogue.md and docs/pretrained.md generated from the registry)."""
