import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from hypothesis import settings

# CI runs the same examples every time; locally, hypothesis explores new ones.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
