"""Using and sharing trained agents: run names (paths, zoo agents, ``hf://``; ``names``), ONNX / TorchScript
export checked against the live policy (``export``), the Hugging Face Hub (``hub``), replay videos
(``video``), and a human playing an agent at a turn-based game (``human``)."""
