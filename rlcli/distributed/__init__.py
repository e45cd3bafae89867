"""One training run across processes, GPUs and machines: the processes of a run (``world``) and the launcher
that starts them on this machine (``launch``), both on torch.distributed and its elastic launcher (torchrun)."""
