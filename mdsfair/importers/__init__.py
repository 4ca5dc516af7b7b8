"""Converters from published checkpoints into mdsfair fairseq checkpoints (``mdsfair-import``)."""
