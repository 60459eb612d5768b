"""Training loops: one readable loop per method (see rlcd.py for the RLCD family)."""
