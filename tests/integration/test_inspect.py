"""`tensord inspect` as a user runs it: exit 0 for every valid model the
generator writes (its table lists every tensor), 1 with the reason on stderr
for every invalid one, 2 for usage errors."""
import os
import subprocess
import tempfile

import pytest

from tdutil import gen_models

BIN = os.environ.get("TENSORD_BIN", os.path.join(os.path.dirname(__file__), "..", "..",
                                                  "build", "tensord"))


@pytest.fixture(scope="module")
def models():
    root = tempfile.mkdtemp(prefix="tensord-inspect-")
    return gen_models.make_test_models(root)


def inspect(*paths):
    return subprocess.run([BIN, "inspect", *paths], capture_output=True, text=True, timeout=60)


def test_every_valid_model(models):
    valid = [n for n in models.models if n not in models.invalid]
    for name in valid:
        info = models.models[name]
        p = inspect(os.path.join(models.root, info.path))
        assert p.returncode == 0, (name, p.stderr)
        for tensor, t in models[name].items():
            assert tensor in p.stdout, (name, tensor)
            assert f"{t.dtype} " in p.stdout
        assert "all valid" in p.stdout.splitlines()[-1]


def test_every_invalid_model_is_rejected_with_its_reason(models):
    assert models.invalid
    for name in models.invalid:
        info = models.models[name]
        p = inspect(os.path.join(models.root, info.path))
        assert p.returncode == 1, (name, p.stdout)
        assert "invalid (" in p.stderr, (name, p.stderr)
        assert "INVALID" in p.stdout.splitlines()[-1]


def test_root_with_a_broken_model_exits_1(models):
    p = inspect(models.root)
    assert p.returncode == 1
    for name in models.invalid:
        assert f"model {name}: invalid" in p.stderr


def test_usage_errors():
    assert inspect().returncode == 2
    p = inspect("/nonexistent/x.safetensors")
    assert p.returncode == 2 and "No such file" in p.stderr
    p = inspect("--bogus")
    assert p.returncode == 2 and 'unknown option "--bogus"' in p.stderr
    for flag in ("--help", "-h"):
        p = inspect(flag)
        assert p.returncode == 0 and p.stdout.startswith("usage: tensord inspect")


def test_trouble_wins_over_invalid(models, tmp_path):
    """tensord(8)'s exit statuses: a path that could not be inspected is 2,
    even beside an invalid model (1)."""
    name = sorted(models.invalid)[0]
    p = inspect(os.path.join(models.root, models.models[name].path), str(tmp_path / "nope"))
    assert p.returncode == 2, p.stdout
    unreadable = tmp_path / "x.safetensors"
    unreadable.write_bytes(b"\0" * 16)
    unreadable.chmod(0)
    if os.access(unreadable, os.R_OK):
        pytest.skip("running as root: every file is readable")
    p = inspect(str(unreadable))
    assert p.returncode == 2 and "cannot open" in p.stderr
