"""Runs on disk: the run directory read once (``rundir``) over its checkpoint files written all or none
(``checkpoint``), and the one-writer lock (``lock``)."""
