"""The README's tour, run as written: `make run` in a network namespace of its
own (so the README's port 8077 is free) with a private /run (where a daemon
run as root puts its lease socket), then every line of the tour's ```sh
block, the README's Python blocks and, when the tests' .venv has
huggingface_hub, the Hugging Face line, each checked for its exit status and
for what it should print. Also: `make run PORT=N` serves there and its
printed examples work, a port in use names PORT=, and the tour leaves no
file in the repository root.

Needs root (unshare, mount, ip) and iproute2; CI and `make test` run as
root. tests/ops/fresh_root.sh runs the same tour on a fresh Debian 12 root
made with debootstrap (by hand: it takes minutes)."""
import os
import re
import shlex
import shutil
import subprocess

import pytest

from conftest import ROOT

README = os.path.join(ROOT, "README.md")


def readme_blocks(lang):
    return re.findall(rf"^```{lang}\n(.*?)^```", open(README).read(), re.S | re.M)


def tour_block():
    text = open(README).read()
    m = re.search(r"A tour, with the daemon running.*?```sh\n(.*?)^```", text, re.S | re.M)
    assert m, "README.md has no tour (```sh block after 'A tour, with the daemon running')"
    return m.group(1)


def commands(block):
    """Shell commands of a block, continuation lines joined."""
    out, cur = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip() and not cur.lstrip().startswith("#"):
            out.append(cur)
        cur = ""
    return out


def hub_line():
    for block in readme_blocks("sh"):
        for cmd in commands(block):
            if cmd.startswith("HF_ENDPOINT="):
                return cmd
    raise AssertionError("README.md lost its huggingface_hub line")


def namespace_or_skip():
    if os.geteuid() != 0:
        pytest.skip("needs root: the tour runs make run in a network and mount namespace")
    for tool in ("unshare", "ip", "curl", "xxd"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("Debian's python3 is not installed")


# Inside the namespace: loopback up, a private /run, Debian's python3 first
# on PATH (this is Debian 12's `python3`; a machine may put another one
# first), `make run` in the background, then each step; `wait_ready` waits
# for HTTP and for the preload.
PRELUDE = """
set -u
ip link set lo up
mount -t tmpfs -o mode=755 tmpfs /run
export PATH=/usr/bin:/bin:$PATH
cd {root}
run_make() {{
    setsid make --no-print-directory run "$@" > "$T/make-run.$1.log" 2>&1 &
}}
wait_ready() {{
    for i in $(seq 600); do
        curl -sf "localhost:$1/readyz" >/dev/null && \\
            curl -s "localhost:$1/v1/models/demo-f32/gpu" | grep -q '"state":"ready"' && return 0
        sleep 0.1
    done
    return 1
}}
step() {{
    n=$1; shift
    bash -o pipefail -c "$1" > "$T/out.$n" 2> "$T/err.$n"
    echo $? > "$T/rc.$n"
}}
"""


def run_in_namespace(tmp_path, script, timeout=240):
    driver = tmp_path / "driver.sh"
    driver.write_text(PRELUDE.format(root=shlex.quote(ROOT)) + script)
    env = {**os.environ, "T": str(tmp_path)}
    env.pop("TENSORD_SOCKET", None)
    return subprocess.run(["unshare", "--fork", "--kill-child", "--mount", "--net", "bash",
                           str(driver)], capture_output=True, text=True, env=env,
                          timeout=timeout)


def results(tmp_path, n):
    def read(name):
        p = tmp_path / f"{name}.{n}"
        return p.read_text(errors="replace") if p.exists() else ""
    return read("rc").strip(), read("out"), read("err")


def test_readme_tour_runs_as_written(tmp_path):
    namespace_or_skip()
    tour = commands(tour_block())
    assert len(tour) >= 20
    pys = readme_blocks("python")
    assert len(pys) >= 2
    for i, code in enumerate(pys):
        (tmp_path / f"block{i}.py").write_text(code)
    hub = hub_line()
    venv_hub = os.path.join(ROOT, ".venv", "bin", "python")
    have_hub = os.access(venv_hub, os.X_OK) and subprocess.run(
        [venv_hub, "-c", "import huggingface_hub"], capture_output=True).returncode == 0
    before = set(os.listdir(ROOT)) - {"models"}
    steps = [("tour", i, cmd) for i, cmd in enumerate(tour)]
    steps += [("py", i, f"PYTHONPATH=client/python python3 {tmp_path}/block{i}.py")
              for i in range(len(pys))]
    if have_hub:
        steps.append(("hub", 0, hub))
    script = "run_make 8077\nwait_ready 8077 || { echo NOT READY; exit 1; }\n"
    for kind, i, cmd in steps:
        script += f"step {kind}{i} {shlex.quote(cmd)}\n"
    p = run_in_namespace(tmp_path, script)
    log = (tmp_path / "make-run.8077.log")
    log = log.read_text(errors="replace") if log.exists() else ""
    assert p.returncode == 0, p.stdout + p.stderr + log
    failed = []
    for kind, i, cmd in steps:
        rc, out, err = results(tmp_path, f"{kind}{i}")
        if rc != "0":
            failed.append(f"{cmd}\n  exit {rc}: {err[-600:]}")
    assert not failed, "\n".join(failed) + "\n--- make run:\n" + log[-3000:]

    def out_of(needle):
        for kind, i, cmd in steps:
            if needle in cmd:
                return results(tmp_path, f"{kind}{i}")[1]
        raise AssertionError(needle)
    # What the lines should show, beyond exiting 0.
    assert '"name":"demo-f32"' in results(tmp_path, "tour0")[1]
    assert out_of("/healthz").startswith('{"status":"ok"}\n')
    assert '"state":"ready"' in out_of("/gpu ")
    assert "00000000:" in out_of("| xxd")
    assert '{"ok":true,"models":[{"name":"demo-f32","state":"ready"' in out_of("tensord-client ls")
    assert "checksum: ok" in out_of("tensord-client open demo-f32")
    assert re.search(r"^host \[\[", out_of("tensord.connect()"), re.M), \
        out_of("tensord.connect()")
    # The banner names the socket the client found.
    assert "for leases on /run/tensord/tensord.sock" in log, log
    # Nothing new in the repository root (make run's ./models aside).
    assert set(os.listdir(ROOT)) - {"models"} == before
    for name in ("embed.bin", "s.bin", "row.npy", "w.safetensors", "rank1.safetensors", "w.npy"):
        assert os.path.getsize(os.path.join(ROOT, "build", "tour", name)) > 0, name


def banner_examples(log):
    return [line.strip() for line in log.splitlines()
            if line.startswith("  ") and line.strip().split()[0] in ("curl", "build/tensord-client",
                                                                     "PYTHONPATH=client/python")]


def test_make_run_port_and_its_printed_examples(tmp_path):
    """make run PORT=8078 serves there, its printed examples use that port
    and work as printed, and a second make run on the same port fails
    naming PORT=."""
    namespace_or_skip()
    script = ("run_make 8078 PORT=8078\nwait_ready 8078 || { echo NOT READY; exit 1; }\n"
              "make --no-print-directory run PORT=8078 > $T/second.log 2>&1; echo $? > $T/second.rc\n"
              "sed -n 's/^  //p' $T/make-run.8078.log | grep -E '^(curl|build/|PYTHONPATH)' "
              "> $T/examples\n"
              "i=0; while IFS= read -r line; do step ex$i \"$line\"; i=$((i+1)); done < $T/examples\n")
    p = run_in_namespace(tmp_path, script)
    log = (tmp_path / "make-run.8078.log").read_text(errors="replace")
    assert p.returncode == 0, p.stdout + p.stderr + log
    examples = banner_examples(log)
    assert len(examples) >= 6, log
    assert all("8077" not in e for e in examples), examples
    assert any("localhost:8078/" in e for e in examples), examples
    for i, e in enumerate(examples):
        rc, out, err = results(tmp_path, f"ex{i}")
        assert rc == "0", f"{e}: {err}"
    second = (tmp_path / "second.log").read_text()
    assert (tmp_path / "second.rc").read_text().strip() != "0"
    assert "Address already in use" in second and "make run PORT=N" in second, second
