"""Test settings: quiet TensorFlow, and the shared Multi30k folder when it is there."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
