"""Shared helpers for the operations checks (tests/ops): paths and tools."""
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool(name):
    """The path of a command-line tool, or skip the test naming what is missing."""
    path = shutil.which(name)
    if not path:
        pytest.skip(f"{name} is not installed (apt-get install the package that has it)")
    return path


def daemon_binary():
    """The built daemon (TENSORD_BIN or build/tensord), or skip."""
    path = os.environ.get("TENSORD_BIN", os.path.join(ROOT, "build", "tensord"))
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built (make all)")
    return path
