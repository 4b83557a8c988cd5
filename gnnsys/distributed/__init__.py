"""Multi-worker plumbing shared by all modes: Ray launcher and the communication layer."""
from .comm import Communicator, CommStats
from .launcher import WorkerContext, launch

__all__ = ["Communicator", "CommStats", "WorkerContext", "launch"]
