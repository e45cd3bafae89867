"""Processes: the one supervisor of benchmark and tune jobs (``workers``), process helpers
(``processes``), and Ctrl-C and SIGTERM handling (``interrupts``)."""
