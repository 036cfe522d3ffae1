"""systemd unit checks: `systemd-analyze verify` accepts the unit and the GPU
drop-in, `systemd-analyze security` rates the sandbox OK or better, and every
hardening directive carries a comment saying why."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, tool

UNIT = os.path.join(ROOT, "systemd", "tensord.service")
DROPIN = os.path.join(ROOT, "systemd", "tensord-gpu.conf")
# systemd 252's scale (src/analyze/analyze-security.c): exposure 0.0 PERFECT,
# <= 1.0 SAFE, <= 5.0 OK, <= 7.5 MEDIUM, <= 9.0 EXPOSED, above UNSAFE/DANGEROUS.
GOOD_LEVELS = {"PERFECT", "SAFE", "OK"}
# Where the unit stands today; a change that weakens the sandbox fails here.
MAX_EXPOSURE = 2.0


def staged_unit(tmp_path, with_gpu=False):
    """The unit copied into tmp_path with ExecStart pointing at an executable
    stub (verify checks that the binary exists), and a man page path so the
    Documentation=man:tensord(8) check finds docs/tensord.8."""
    stub = tmp_path / "tensord"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    text = open(UNIT).read().replace("/usr/local/bin/tensord", str(stub))
    unit = tmp_path / "tensord.service"
    unit.write_text(text)
    if with_gpu:
        d = tmp_path / "tensord.service.d"
        d.mkdir()
        shutil.copy(DROPIN, d / "gpu.conf")
    man8 = tmp_path / "man" / "man8"
    man8.mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "docs", "tensord.8"), man8 / "tensord.8")
    env = {**os.environ, "MANPATH": str(tmp_path / "man"), "SYSTEMD_LOG_COLOR": "0"}
    return unit, env


@pytest.mark.parametrize("with_gpu", [False, True], ids=["unit", "unit+gpu-dropin"])
def test_verify(tmp_path, with_gpu):
    sa = tool("systemd-analyze")
    unit, env = staged_unit(tmp_path, with_gpu)
    p = subprocess.run([sa, "verify", str(unit)], capture_output=True, text=True, env=env,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    # verify also warns (exit 0) about unknown or misspelled directives.
    assert "tensord" not in p.stderr, p.stderr


def exposure(tmp_path, with_gpu):
    sa = tool("systemd-analyze")
    unit, env = staged_unit(tmp_path, with_gpu)
    p = subprocess.run([sa, "security", "--offline=yes", "--no-pager", str(unit)],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    if "Unknown option" in p.stderr or "unrecognized option" in p.stderr:
        pytest.skip("this systemd-analyze has no --offline (needs systemd >= 250)")
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+) (\w+)", p.stdout + p.stderr)
    assert m, p.stdout[-3000:] + p.stderr
    return float(m.group(1)), m.group(2), p.stdout


@pytest.mark.parametrize("with_gpu", [False, True], ids=["unit", "unit+gpu-dropin"])
def test_security_rating(tmp_path, with_gpu):
    score, level, report = exposure(tmp_path, with_gpu)
    print(f"exposure {score} {level}")
    assert level in GOOD_LEVELS, report
    assert score <= MAX_EXPOSURE, report


HARDENING = re.compile(
    r"^(Protect\w+|Private\w+|Restrict\w+|NoNewPrivileges|CapabilityBoundingSet|"
    r"AmbientCapabilities|SystemCall\w+|LockPersonality|MemoryDenyWriteExecute|RemoveIPC|"
    r"DynamicUser|Device\w+|ReadOnlyPaths|ProcSubset|UMask)=")


@pytest.mark.parametrize("path", [UNIT, DROPIN], ids=["unit", "gpu-dropin"])
def test_every_hardening_line_is_explained(path):
    lines = open(path).read().splitlines()
    for i, line in enumerate(lines):
        if HARDENING.match(line):
            # A comment directly above (or above a run of related lines).
            j = i - 1
            while j >= 0 and HARDENING.match(lines[j]):
                j -= 1
            assert j >= 0 and lines[j].startswith("#"), f"{path}:{i + 1}: {line} has no comment"


def test_unit_has_the_required_settings():
    text = open(UNIT).read()
    for needle in ["Type=notify", "ExecStart=/usr/local/bin/tensord serve --config "
                   "/etc/tensord/tensord.conf", "ExecReload=/bin/kill -HUP $MAINPID",
                   "ProtectSystem=strict", "StateDirectory=tensord", "RuntimeDirectory=tensord",
                   "ConfigurationDirectory=tensord", "NoNewPrivileges=yes",
                   "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "LimitNOFILE=65536",
                   "SystemCallFilter=@system-service", "CapabilityBoundingSet=\n"]:
        assert needle in text, needle
    gpu = open(DROPIN).read()
    for needle in ["PrivateDevices=no", "DevicePolicy=closed", "DeviceAllow=/dev/nvidiactl rw",
                   "DeviceAllow=/dev/nvidia-uvm rw", "DeviceAllow=char-nvidia-frontend rw",
                   "DeviceAllow=char-nvidia-uvm rw", "After=systemd-modules-load.service"]:
        assert needle in gpu, needle


def test_gpu_dropin_keeps_the_module_and_privilege_fences():
    """nvidia-uvm loaded on demand cannot work inside the sandbox (the
    drop-in explains why and what to do instead); the drop-in must not
    "fix" that by reopening module loading or privilege gain."""
    gpu = open(DROPIN).read()
    settings = [line for line in gpu.splitlines() if line and not line.startswith("#")]
    for forbidden in ("ProtectKernelModules=", "NoNewPrivileges=", "CapabilityBoundingSet=",
                      "AmbientCapabilities="):
        assert not any(x.startswith(forbidden) for x in settings), forbidden
    assert "modules-load.d" in gpu and "nvidia-modprobe" in gpu
