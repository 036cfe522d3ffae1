"""Starting and stopping the two servers under test: tensord and a static nginx.

nginx runs as a non-daemon master from its own prefix and config (nothing under
/etc/nginx is read or written), with the settings an operator would use for a static
file server: sendfile, as many workers as tensord has threads, no access log, an
open-file cache, and keep-alive that does not cut wrk's connections every 1,000
requests (nginx's default keepalive_requests).
"""
import json
import os
import signal
import socket
import subprocess
import time

NGINX = "/usr/sbin/nginx"

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes {workers};
user root;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{
    worker_connections 4096;
    multi_accept on;
}}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000000;
    keepalive_timeout 300s;
    open_file_cache max=2000 inactive=300s;
    open_file_cache_valid 300s;
    default_type application/octet-stream;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port} reuseport backlog=4096;
        root {root};
        location / {{ }}
    }}
}}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(port, path, timeout=1.0):
    """Status code of GET path, or None when nothing answers yet."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
            line = s.recv(64).split(b"\r\n", 1)[0].split()
            return int(line[1]) if len(line) >= 2 else None
    except (OSError, ValueError):
        return None


class Server:
    def __init__(self, name, argv, port, ready_path, log_path):
        self.name, self.port, self.ready_path = name, port, ready_path
        self.log = open(log_path, "wb")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.ready_s = None

    def wait_ready(self, timeout=180.0, poll=0.002, ok=(200,)):
        """Polls until ready_path answers a status in `ok`; returns seconds since the spawn."""
        deadline = self.t0 + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; "
                                   f"see {self.log.name}")
            if http_status(self.port, self.ready_path) in ok:
                self.ready_s = time.monotonic() - self.t0
                return self.ready_s
            time.sleep(poll)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s; see {self.log.name}")

    def proc_status(self):
        """VmRSS and VmHWM in KiB of the main process, from /proc."""
        out = {}
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0])
        return out

    def cpu_seconds(self):
        """user+system CPU of the whole process group so far (nginx: master and workers)."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in [self.proc.pid] + children(self.proc.pid):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            except OSError:
                pass
        return total / tick

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT if self.name == "nginx" else signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def has_option(binary, name):
    """Whether this tensord binary knows option `name` (an older build may not)."""
    out = subprocess.run([binary, "--print-config"], capture_output=True, text=True).stdout
    return any(line.split("=")[0].strip() == name for line in out.splitlines())


def start_tensord(binary, models, threads, workdir, tag="tensord", extra=()):
    port = free_port()
    argv = [binary, "serve", "--models", models, "--listen", f"127.0.0.1:{port}",
            "--threads", str(threads), "--access-log", "off", *extra]
    if has_option(binary, "state_dir"):
        # Content hashes are kept per benchmark tree, never in /var/lib/tensord.
        argv += ["--state-dir", os.path.join(os.path.dirname(os.path.abspath(models)), "state")]
    return Server("tensord", argv, port, "/readyz", os.path.join(workdir, f"{tag}.log"))


def wait_hashed(srv, timeout=300.0):
    """Waits until tensord knows every file's content hash, so the background
    hashing (a first start over the benchmark's 1.2 GB reads it all) is not
    measured with the requests. Returns at once for a build without hashes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
                s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    c = s.recv(1 << 20)
                    if not c:
                        break
                    data += c
            doc = json.loads(data.split(b"\r\n\r\n", 1)[1])
        except (OSError, ValueError, IndexError):
            doc = {}
        h = doc.get("hashing")
        if h is None or (h.get("files_pending") == 0 and h.get("files_known") == h.get("files")):
            return
        time.sleep(0.2)
    raise RuntimeError("tensord did not finish hashing its models")


def start_nginx(root, workers, workdir):
    prefix = os.path.join(workdir, "nginx")
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(prefix, sub), exist_ok=True)
    port = free_port()
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(workers=workers, prefix=prefix, port=port,
                                  root=os.path.abspath(root)))
    argv = [NGINX, "-p", prefix, "-c", conf, "-e", os.path.join(prefix, "error.log")]
    return Server("nginx", argv, port, "/shard50/model.safetensors.index.json",
                  os.path.join(workdir, "nginx.log"))
