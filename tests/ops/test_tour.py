"""The README's tour, run as written (tests/ops/tour.py does the work and
says how); and `make run PORT=N`: it serves there, its printed examples use
that port and work as printed, and a port in use names PORT=.

Needs root (unshare, mount, ip) and iproute2; CI and `make test` run as
root. tests/ops/fresh_root.sh runs the same tour on a fresh Debian 12 root
made with debootstrap (by hand: it takes minutes)."""
import os
import shutil

import pytest

import tour


def namespace_or_skip():
    if os.geteuid() != 0:
        pytest.skip("needs root: the tour runs make run in a network and mount namespace")
    for tool in ("unshare", "ip", "curl", "xxd"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("Debian's python3 is not installed")


def test_readme_tour_runs_as_written(tmp_path):
    namespace_or_skip()
    failed, steps = tour.run_tour(str(tmp_path))
    assert any(name == "hub" for name, _ in steps) or not os.path.exists(
        os.path.join(tour.ROOT, ".venv")), "the .venv has no huggingface_hub"
    assert not failed, "\n".join(failed)


def test_make_run_port_and_its_printed_examples(tmp_path):
    """make run PORT=8078 serves there, its printed examples use that port
    and work as printed, and a second make run on the same port fails
    naming PORT=."""
    namespace_or_skip()
    script = ("run_make 8078 PORT=8078\nwait_ready 8078 || { echo NOT READY; exit 1; }\n"
              "make --no-print-directory run PORT=8078 > $T/second.log 2>&1; "
              "echo $? > $T/second.rc\n"
              "sed -n 's/^  //p' $T/make-run.8078.log | "
              "grep -E '^(export|curl|build/|PYTHONPATH)' > $T/examples\n"
              # the printed `export` holds for the lines after it, as in a shell
              "i=0; while IFS= read -r line; do case \"$line\" in export*) eval \"$line\";; "
              "*) step ex$i \"$line\"; i=$((i+1));; esac; done < $T/examples\n")
    p = tour.run_in_namespace(str(tmp_path), script)
    log = tour.read_log(str(tmp_path), 8078)
    assert p.returncode == 0, p.stdout + p.stderr + log
    examples = (tmp_path / "examples").read_text().splitlines()
    assert len(examples) >= 6, log
    assert all("8077" not in e for e in examples), examples
    assert "export TENSORD_URL=http://localhost:8078" in examples, examples
    assert "The web console: http://localhost:8078/ui/" in log
    for i, e in enumerate(e for e in examples if not e.startswith("export")):
        rc, out, err = tour.results(str(tmp_path), f"ex{i}")
        assert rc == "0", f"{e}: {err}"
    second = (tmp_path / "second.log").read_text()
    assert (tmp_path / "second.rc").read_text().strip() != "0"
    assert "Address already in use" in second and "make run PORT=N" in second, second
