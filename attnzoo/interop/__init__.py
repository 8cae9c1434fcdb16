"""attnzoo and other formats, above the core: ``export`` (torch.export ``.pt2`` and ONNX, checked after
writing) and ``convert`` (reference checkpoints of the ICD-coding literature into safetensors). Keras
files have their own package, ``attnzoo.keras``.
"""
