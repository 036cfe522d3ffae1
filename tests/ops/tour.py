#!/usr/bin/python3
"""The README's tour, run as written (tests/ops/test_tour.py, and by hand in
a fresh Debian 12 root by tests/ops/fresh_root.sh): `make run` in a network
namespace of its own (so the README's port 8077 is free) with a private /run
(where a daemon run as root puts its lease socket), then every line of the
tour's ```sh block, the README's Python blocks and, when the tests' .venv
has huggingface_hub, the Hugging Face line, each checked for its exit status
and for what it should print, and that no file appears in the repository
root.

    tour.py [--in-namespace]

--in-namespace: the caller already made the namespace (loopback up, /run
private), as fresh_root.sh does around its chroot. Needs root (unshare,
mount, ip). Standard library only: it runs where only `make run`'s packages
are installed. Exit status 0 when every step passed."""
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


# Loopback up and a private /run (unless the caller made them), Debian's
# python3 first on PATH (this is Debian 12's `python3`; a machine may put
# another one first), `make run` in the background, then each step;
# `wait_ready` waits for HTTP and for the preload.
NAMESPACE = """
ip link set lo up
mount -t tmpfs -o mode=755 tmpfs /run
"""
PRELUDE = """
set -u
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH
cd {root}
run_make() {{
    setsid make --no-print-directory run "$@" > "$T/make-run.$1.log" 2>&1 &
    echo $! >> "$T/make-run.pids"
}}
# Each make run leads its own process group (setsid): unshare --kill-child
# ends only this script, so the daemons are stopped here when it exits.
stop_make_runs() {{
    [ -f "$T/make-run.pids" ] || return 0
    while read -r p; do kill -TERM -- "-$p" 2>/dev/null; done < "$T/make-run.pids"
}}
trap stop_make_runs EXIT
wait_ready() {{
    for i in $(seq 900); do
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


def run_in_namespace(tmp, script, in_namespace=False, timeout=600):
    driver = os.path.join(tmp, "driver.sh")
    with open(driver, "w") as f:
        f.write(("" if in_namespace else NAMESPACE) + PRELUDE.format(root=shlex.quote(ROOT))
                + script)
    env = {**os.environ, "T": tmp}
    env.pop("TENSORD_SOCKET", None)
    cmd = ["bash", driver]
    if not in_namespace:
        cmd = ["unshare", "--fork", "--kill-child", "--mount", "--net"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def results(tmp, n):
    def read(name):
        p = os.path.join(tmp, f"{name}.{n}")
        return open(p, errors="replace").read() if os.path.exists(p) else ""
    return read("rc").strip(), read("out"), read("err")


def read_log(tmp, port):
    p = os.path.join(tmp, f"make-run.{port}.log")
    return open(p, errors="replace").read() if os.path.exists(p) else ""


def run_tour(tmp, in_namespace=False):
    """Runs the tour; returns a list of failures (empty: all passed) and the
    steps' names and commands."""
    tour = commands(tour_block())
    assert len(tour) >= 20
    pys = readme_blocks("python")
    assert len(pys) >= 3
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    have_hub = os.access(venv, os.X_OK) and subprocess.run(
        [venv, "-c", "import huggingface_hub"], capture_output=True).returncode == 0
    # A block that says it needs PyTorch runs where Debian's python3 has it
    # (make test installs it; make run does not).
    have_torch = subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                                capture_output=True).returncode == 0
    if not have_torch:
        print("tour: the README's Python block that needs PyTorch is skipped (no torch here)")
        pys = [code for code in pys if not code.startswith("# needs PyTorch")]
    for i, code in enumerate(pys):
        with open(os.path.join(tmp, f"block{i}.py"), "w") as f:
            f.write(code)
    before = set(os.listdir(ROOT)) - {"models"}
    # The tour's `export` lines (its one address, TENSORD_URL) hold for
    # every step after them, as in the reader's shell: each step runs in a
    # shell of its own, so they are put in front of each.
    exports = "".join(re.sub(r"\s+#.*$", "", cmd) + "; " for cmd in tour
                      if cmd.startswith("export "))
    assert "TENSORD_URL=" in exports, "the tour lost its TENSORD_URL"
    assert not [c for c in tour if "8077" in c and not c.startswith("export ")], \
        "the tour names its port outside its one variable"
    steps = [(f"tour{i}", exports + cmd) for i, cmd in enumerate(tour)
             if not cmd.startswith("export ")]
    steps += [(f"py{i}", f"{exports}PYTHONPATH=client/python python3 {tmp}/block{i}.py")
              for i in range(len(pys))]
    if have_hub:
        steps.append(("hub", exports + hub_line()))
    script = "run_make 8077\nwait_ready 8077 || { echo NOT READY; exit 1; }\n"
    for name, cmd in steps:
        script += f"step {name} {shlex.quote(cmd)}\n"
    p = run_in_namespace(tmp, script, in_namespace)
    log = read_log(tmp, 8077)
    if p.returncode != 0:
        return [f"make run did not come up: {p.stdout}{p.stderr}\n{log[-3000:]}"], steps
    failed = []
    for name, cmd in steps:
        rc, out, err = results(tmp, name)
        if rc != "0":
            failed.append(f"{cmd}\n  exit {rc}: {err[-600:]}")

    def out_of(needle):
        for name, cmd in steps:
            if needle in cmd:
                return results(tmp, name)[1]
        return ""
    # What the lines should show, beyond exiting 0.
    expect = [
        ('"name":"demo-f32"' in results(tmp, steps[0][0])[1], "/v1/models lists demo-f32"),
        (out_of("/healthz").startswith('{"status":"ok"}\n'), "healthz, with its newline"),
        ('"state":"ready"' in out_of("/gpu "), "the preload is ready"),
        ("00000000:" in out_of("| xxd"), "xxd shows the Range answer"),
        ('{"ok":true,"models":[{"name":"demo-f32","state":"ready"' in out_of("tensord-client ls"),
         "tensord-client ls lists the preload"),
        ("checksum: ok" in out_of("tensord-client open demo-f32"), "tensord-client open checks"),
        (re.search(r"^(host|cuda) ", out_of("tensord.connect()"), re.M),
         "tensord.connect() opens the preload"),
        ("for leases on /run/tensord/tensord.sock" in log, "make run names the socket"),
        ("The web console: http://localhost:8077/ui/" in log, "make run names the console"),
        (out_of("/v1/openapi.json").startswith('{"openapi":"3.1.0"'), "the OpenAPI description"),
        ("KEPT" in out_of("tensord download") or "DOWNLOADED" in out_of("tensord download"),
         "tensord-http downloads a model"),
        (set(os.listdir(ROOT)) - {"models"} == before, "no new file in the repository root"),
    ]
    for name in ("embed.bin", "s.bin", "row.npy", "w.safetensors", "rank1.safetensors", "w.npy"):
        path = os.path.join(ROOT, "build", "tour", name)
        expect.append((os.path.exists(path) and os.path.getsize(path) > 0, f"build/tour/{name}"))
    failed += [f"expected: {what}" for ok, what in expect if not ok]
    if failed:
        failed.append("--- make run:\n" + log[-3000:])
    return failed, steps


def main():
    with tempfile.TemporaryDirectory(prefix="tensord-tour-") as tmp:
        failed, steps = run_tour(tmp, "--in-namespace" in sys.argv[1:])
        for line in failed:
            print(line)
        print(f"{len(steps) - len([f for f in failed if not f.startswith(('expected', '---'))])} "
              f"of {len(steps)} tour steps passed; {'FAILED' if failed else 'all as expected'}")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
