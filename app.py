"""Hugging Face Spaces entry point: the rlcd_lab dashboard."""

from rlcd_lab.dashboard import build_demo

demo = build_demo()

if __name__ == "__main__":
    demo.launch()
