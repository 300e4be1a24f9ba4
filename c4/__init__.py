"""c4: communication-driven diagnosis, traffic planning and recovery for training jobs."""

__version__ = "0.1.0"
