"""rlcd_lab: reinforcement learning for calibrated decisions."""

__version__ = "0.1.0"
