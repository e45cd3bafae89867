"""Sharing a trained agent: ONNX / TorchScript export checked against the live policy (``export``), the
Hugging Face Hub (``hub``), replay videos (``video``)."""
