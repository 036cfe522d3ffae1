"""The web console (/ui/) in headless Chromium, driven over the DevTools
protocol (cdp.py), against a daemon on generated models: the model list and
its search, a 100,000-tensor model's table (filter, scroll, keyboard,
snippets), a GPU preload on the host backend and its evict, charts that move
under load, names and metadata that carry markup, at 1280x800 and at a
phone's 390 px; no console error anywhere. Screenshots of every view go to
build/ui-artifacts/.

Skipped, saying why, where Chromium is not installed (`make deps` installs
Debian's chromium)."""
import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.parse

import pytest

import cdp
import tdutil
from tdutil import gen_models

ARTIFACTS = os.path.join(tdutil.REPO, "build", "ui-artifacts")
MANY = 100_000
# Names that are markup: a console that put them into the page as HTML would
# run them (they set window.pwned or add an <img>).
EVIL_MODEL = 'evil<img src=x onerror="window.pwned=1">'
EVIL_TENSOR = '<script>window.pwned=2</script>"\'; rm -rf /'
EVIL_META = '<img src=x onerror="window.pwned=3">'

pytestmark = pytest.mark.skipif(
    cdp.find_chromium() is None,
    reason="chromium is not installed (Debian package chromium; `make deps` installs it)")


@pytest.fixture(scope="module")
def ui_daemon():
    base = tempfile.mkdtemp(prefix="tensord-ui-")
    root = os.path.join(base, "models")
    gen_models.make_demo_models(root)
    gen_models.make_many_tensors(os.path.join(root, "many", "model.safetensors"), MANY,
                                 metadata={"format": "pt", "note": "100,000 tensors"})
    gen_models.write_safetensors(
        os.path.join(root, EVIL_MODEL, "model.safetensors"),
        [(EVIL_TENSOR, "F32", (2, 3), b"\0" * 24), ("ok", "BF16", (4,), b"\0" * 8)],
        {"format": "pt", EVIL_META: EVIL_META})
    os.makedirs(os.path.join(root, "broken"))
    with open(os.path.join(root, "broken", "model.safetensors"), "wb") as f:
        f.write(b"\x10\0\0\0\0\0\0\0{}")   # header length past the end of the file
    os.makedirs(ARTIFACTS, exist_ok=True)
    access = os.path.join(base, "access.log")
    d = tdutil.Daemon(root, base, ["--access-log", access]).start()
    d.access_log = access
    d.wait_hashed()
    try:
        yield d
    finally:
        d.stop_checked()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def desktop():
    with cdp.Browser(1280, 800) as b:
        yield b


@pytest.fixture(scope="module")
def phone():
    with cdp.Browser(390, 844, mobile=True) as b:
        yield b


def shot(b, name):
    b.pump(0.2)  # let the page paint what it was just given
    b.screenshot(os.path.join(ARTIFACTS, name + ".png"))


def open_view(b, d, view):
    """A fresh load of the page at view (a new fragment alone would keep the
    old view's elements around until the page's hashchange handler runs)."""
    b.goto("about:blank")
    b.goto(f"http://127.0.0.1:{d.port}/ui/{view}")


def access_lines_for(d, needle):
    with open(d.access_log) as f:
        return [ln for ln in f if needle in ln]


def assert_clean(b):
    assert b.errors() == [], b.errors()
    assert b.eval("window.pwned === undefined && !document.querySelector('main img, main script')")


def test_page_and_assets_are_served_safely(ui_daemon):
    d = ui_daemon
    total = 0
    for path, ctype in (("/ui/", "text/html"), ("/ui/app.js", "text/javascript"),
                        ("/ui/app.css", "text/css")):
        r = d.get(path)
        assert r.status == 200 and r.ctype == ctype, (path, r.status, r.ctype)
        total += len(r.body)
        csp = r.header("Content-Security-Policy")
        assert "default-src 'none'" in csp and "script-src 'self'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert r.header("X-Content-Type-Options") == "nosniff"
        etag = r.header("ETag")
        assert re.fullmatch(r'"u[0-9a-f]{32}"', etag)
        again = d.get(path, {"If-None-Match": etag})
        assert again.status == 304 and again.body == b""
    assert total < 200 * 1024, f"the console is {total} bytes"
    page = d.get("/ui/").body.decode()
    # No inline script or handler (the policy would refuse them anyway).
    assert not re.search(r"<script(?![^>]*\ssrc=)|\son[a-z]+\s*=|style=", page)
    assert "http://" not in page and "https://" not in page   # nothing from elsewhere
    r = d.get("/ui")
    assert r.status == 301 and r.header("Location") == "/ui/"
    assert d.get("/ui/nothing.js").status == 404
    # Daemon time per answer, from the access log's milliseconds.
    with open(d.access_log) as f:
        ms = [float(ln.split()[5]) for ln in f if " /ui/" in ln and " 200 " in ln]
    assert ms and max(ms) < 50, ms


def test_models_list_and_search(ui_daemon, desktop):
    b, d = desktop, ui_daemon
    open_view(b, d, "#/models")
    b.wait_for("document.querySelectorAll('#models tbody tr').length >= 7")
    names = b.eval("[...document.querySelectorAll('#models tbody td.name')].map(e => e.textContent)")
    assert EVIL_MODEL in names and "many" in names and "org/demo-i8" in names
    row = b.eval("""(() => { const r = [...document.querySelectorAll('#models tbody tr')]
        .find(r => r.cells[0].textContent === 'many'); return [...r.cells].map(c => c.textContent); })()""")
    assert row[1] == "ready" and row[3] == "1" and row[4] == "100,000"
    assert row[5] == "U8\u00a0100.0\u00a0k"            # parameters by dtype
    assert re.fullmatch(r"[0-9a-f]{12}", row[6])    # the repo's commit
    broken = b.eval("""[...document.querySelectorAll('#models tbody tr')]
        .find(r => r.cells[0].textContent === 'broken').cells[1].textContent""")
    assert broken.startswith("invalid") and "header" in broken
    shot(b, "models-1280")
    b.eval("document.getElementById('model-search').focus()")
    b.type("demo")
    b.wait_for("document.querySelectorAll('#models tbody tr').length === 4")
    assert "4 of" in b.eval("document.querySelector('.toolbar').textContent")
    assert_clean(b)


def test_big_model_table_filter_scroll_keys(ui_daemon, desktop):
    b, d = desktop, ui_daemon
    t0 = time.monotonic()
    open_view(b, d, "#/model/many")
    b.wait_for("document.querySelector('#tensors .vrow')", timeout=30)
    shown_s = time.monotonic() - t0
    # A model whose hashes are all known is fetched once, not polled.
    fetched = len(access_lines_for(d, " /v1/models/many "))
    b.pump(2.5)
    assert len(access_lines_for(d, " /v1/models/many ")) == fetched == 1
    assert b.eval("document.querySelector('#tensors').getAttribute('aria-rowcount')") == str(MANY + 1)
    rows = b.eval("document.querySelectorAll('#tensors .vrow').length")
    assert 5 < rows < 80, rows                      # virtualised: a window of rows
    # Scroll to the end: the last tensor is drawn, still only a window of rows.
    b.eval("(() => { const v = document.querySelector('#tensors .vbody'); v.scrollTop = v.scrollHeight; })()")
    b.wait_for("[...document.querySelectorAll('#tensors .vrow span:first-child')]"
               ".some(s => s.textContent === 'model.layers.0099999.self_attn.q_proj.weight')")
    assert b.eval("document.querySelectorAll('#tensors .vrow').length") < 80
    shot(b, "model-100k-scrolled-1280")
    # Filter by name.
    b.eval("document.getElementById('tensor-filter').focus()")
    b.type("0004242")
    b.wait_for("document.querySelectorAll('#tensors .vrow').length === 1")
    assert "1 of 100,000" in b.eval("document.querySelector('#tensors').parentNode.parentNode.textContent")
    # Keyboard: down from the filter into the table selects the row; its snippets follow.
    b.key("ArrowDown", "ArrowDown", 40)
    b.wait_for("document.getElementById('snippets')")
    sel = b.eval("document.querySelector('#tensors .vrow[aria-selected=true] span').textContent")
    assert sel == "model.layers.0004242.self_attn.q_proj.weight"
    snippet = b.eval("document.querySelector('#snippets pre').textContent")
    assert snippet.startswith("curl -fsS ") and "/v1/models/many/tensors/model.layers.0004242" in snippet
    b.eval("document.getElementById('slice').focus()")
    b.type("0:1")
    b.wait_for("document.querySelector('#snippets pre').textContent.includes('?slice=0%3A1')")
    py = b.eval("document.querySelectorAll('#snippets pre')[1].textContent")
    assert 'f.get_slice("model.layers.0004242.self_attn.q_proj.weight")[0:1]' in py
    hf = b.eval("document.querySelectorAll('#snippets pre')[2].textContent")
    assert 'hf_hub_download("many", "model.safetensors")' in hf
    shot(b, "model-100k-filtered-1280")
    # Clear the filter and walk with the keys: PageDown moves a page.
    b.eval("(() => { const f = document.getElementById('tensor-filter'); f.value = ''; "
           "f.dispatchEvent(new Event('input')); })()")
    b.wait_for("document.querySelectorAll('#tensors .vrow').length > 5")
    b.eval("document.querySelector('#tensors .vbody').focus()")
    b.key("End", "End", 35)
    b.wait_for("document.querySelector('#tensors .vrow[aria-selected=true] span').textContent"
               " === 'model.layers.0099999.self_attn.q_proj.weight'")
    b.key("PageUp", "PageUp", 33)
    idx = b.eval("Number(document.querySelector('#tensors .vrow[aria-selected=true]').dataset.index)")
    assert 99970 < idx < 99999
    assert shown_s < 15, f"the 100,000-tensor table took {shown_s:.1f} s"
    assert_clean(b)


def test_hostile_names_stay_text(ui_daemon, desktop):
    b, d = desktop, ui_daemon
    open_view(b, d, "#/model/" + urllib.parse.quote(EVIL_MODEL, safe=""))
    b.wait_for("document.querySelector('#tensors .vrow')")
    assert EVIL_MODEL in b.eval("document.querySelector('h2').textContent")
    names = b.eval("[...document.querySelectorAll('#tensors .vrow span:first-child')].map(s => s.textContent)")
    assert EVIL_TENSOR in names
    assert EVIL_META in b.eval("document.querySelector('dl.kv').textContent")
    b.eval("[...document.querySelectorAll('#tensors .vrow')].find(r => r.textContent.startsWith('<script>')).click()")
    b.wait_for("document.getElementById('snippets')")
    curl = b.eval("document.querySelector('#snippets pre').textContent")
    # The shell sees one quoted URL (percent-encoded name) and a quoted file name.
    assert "%3Cscript%3E" in curl and "'\\''" in curl
    shot(b, "model-hostile-1280")
    assert_clean(b)


def test_gpu_preload_and_evict_on_host(ui_daemon, desktop):
    b, d = desktop, ui_daemon
    open_view(b, d, "#/gpu")
    b.wait_for("document.querySelector('#preload-model option[value=\"demo-f32\"]')")
    b.eval("document.getElementById('preload-model').value = 'demo-f32'")
    b.eval("document.getElementById('preload-device').value = 'host'")
    b.eval("document.getElementById('preload').click()")
    host = "document.querySelector('#instances section[data-device=\"host\"]')"
    b.wait_for(f"(() => {{ const t = {host}; "
               "return t && /demo-f32\\s*whole\\s*ready/.test(t.textContent); })()")
    assert json.loads(d.get("/v1/models/demo-f32/gpu").body)["state"] == "ready"
    assert "100%" in b.eval(host + ".textContent")
    shot(b, "gpu-preloaded-1280")
    # Two ranks of a split on the same device: one row each, evicted alone.
    r = d.request("POST", "/v1/models/demo-sharded/gpu", body=json.dumps(
        {"devices": ["host", "host"], "split": {"world": 2, "rules": [{"match": "*", "dim": 0}]}}
    ).encode())
    assert r.status == 202, r.body
    b.wait_for(f"(() => {{ const t = {host}; return t && /rank 0 of 2\\s*ready/.test(t.textContent)"
               " && /rank 1 of 2\\s*ready/.test(t.textContent); })()")
    shot(b, "gpu-ranks-1280")
    rank1 = ("[...document.querySelectorAll('#instances button')].find(x => "
             "x.getAttribute('aria-label') === 'Evict demo-sharded on host (rank 1 of 2)')")
    b.eval(rank1 + ".click()")
    b.eval(rank1 + ".click()")
    b.wait_for(f"!/rank 1 of 2/.test({host}.textContent)")
    s = json.loads(d.get("/v1/models/demo-sharded/gpu").body)
    assert s["state"] == "ready" and s["rank"] == 0 and s["world"] == 2, s
    assert d.request("DELETE", "/v1/models/demo-sharded/gpu").status == 200
    btn = ("[...document.querySelectorAll('#instances button')].find(x => "
           "x.getAttribute('aria-label') === 'Evict demo-f32 on host')")
    b.eval(btn + ".click()")
    assert b.eval(btn + ".textContent") == "Confirm evict"
    b.eval(btn + ".click()")
    b.wait_for("document.querySelector('#no-instances')")
    assert json.loads(d.get("/v1/models/demo-f32/gpu").body)["state"] == "none"
    shot(b, "gpu-evicted-1280")
    assert_clean(b)


def test_gpu_page_hostile_name_and_many_instances(ui_daemon, desktop):
    """A model whose name is markup, held whole and as 12 ranks on the host:
    the GPU page lists every instance, the name stays text, and evicting one
    rank from the page evicts that rank alone."""
    b, d = desktop, ui_daemon
    path = "/v1/models/" + urllib.parse.quote(EVIL_MODEL, safe="") + "/gpu"
    assert d.request("POST", path, body=b'{"device": "host"}').status == 202
    r = d.request("POST", path, body=json.dumps({"devices": ["host"] * 12, "split": {
        "world": 12, "rules": [{"match": "*", "dim": -1}]}}).encode())
    assert r.status == 202, r.body
    open_view(b, d, "#/gpu")
    host = "document.querySelector('#instances section[data-device=\"host\"]')"
    rows = f"[...{host}.querySelectorAll('tbody tr')].filter(r => r.cells[0].textContent === {json.dumps(EVIL_MODEL)})"
    b.wait_for(f"{host} && {rows}.length === 13 && {rows}.every(r => /ready/.test(r.cells[2].textContent))")
    assert b.eval(f"{rows}.map(r => r.cells[1].textContent).includes('rank 11 of 12')")
    label = json.dumps(f"Evict {EVIL_MODEL} on host (rank 11 of 12)")
    btn = f"[...document.querySelectorAll('#instances button')].find(x => x.getAttribute('aria-label') === {label})"
    b.eval(btn + ".click()")
    b.eval(btn + ".click()")
    b.wait_for(f"{rows}.length === 12")
    s = json.loads(d.get(path).body)
    assert sorted(i.get("rank", -1) for i in s["instances"]) == [-1] + list(range(11)), s
    shot(b, "gpu-hostile-1280")
    assert d.request("DELETE", path).status == 200
    assert_clean(b)


def test_charts_move_under_load(ui_daemon, desktop):
    b, d = desktop, ui_daemon
    open_view(b, d, "#/metrics")
    b.wait_for("document.querySelector('#chart-bytes')")
    b.pump(2.5)   # two samples: a first point
    before = b.eval("document.getElementById('chart-endpoints').toDataURL()")
    stop = threading.Event()

    def load():
        while not stop.is_set():
            d.get("/v1/models/many/tensors/model.layers.0000001.self_attn.q_proj.weight")
            d.get("/v1/models/demo-f32/files/model.safetensors")

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        b.wait_for("/tensor: [1-9]/.test(document.querySelector('#chart-endpoints').parentNode.textContent)",
                   timeout=15)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert b.eval("document.getElementById('chart-endpoints').toDataURL()") != before
    label = b.eval("document.getElementById('chart-bytes').getAttribute('aria-label')")
    assert label.startswith("Bytes/s sent, now: bytes/s ")
    shot(b, "metrics-1280")
    assert_clean(b)


@pytest.mark.parametrize("view,ready", [
    ("#/models", "document.querySelectorAll('#models tbody tr').length >= 7"),
    ("#/model/demo-sharded", "document.querySelector('#tensors .vrow')"),
    ("#/gpu", "document.querySelector('#preload-model option')"),
    ("#/metrics", "document.querySelector('#chart-bytes')"),
])
def test_phone_width(ui_daemon, phone, view, ready):
    b, d = phone, ui_daemon
    open_view(b, d, view)
    b.wait_for(ready)
    b.pump(0.3)
    # Nothing wider than the screen but what scrolls inside its own box.
    assert b.eval("document.documentElement.scrollWidth") <= 390
    name = {"#/models": "models", "#/model/demo-sharded": "model", "#/gpu": "gpu", "#/metrics": "metrics"}[view]
    shot(b, name + "-390")
    if name == "model":
        b.eval("document.getElementById('tensors').scrollIntoView()")
        b.eval("document.querySelector('#tensors .vrow').click()")
        b.wait_for("document.getElementById('snippets')")
        assert b.eval("document.documentElement.scrollWidth") <= 390
        shot(b, "model-tensors-390")
    assert_clean(b)


def test_hashing_progress(tmp_path, desktop):
    """While a file's SHA-256 is being computed (paced here to 4 MiB/s), the
    list says "hashing" with the files done and the model page says so for
    the file; once known, the hash shows."""
    root = tmp_path / "models"
    gen_models.make_demo_models(str(root))
    gen_models.make_big(str(root / "slow" / "model.safetensors"), 512, 65536)   # 32 MiB
    d = tdutil.Daemon(str(root), str(tmp_path), ["--hash-max-bytes-per-second", "4M"]).start()
    try:
        b = desktop
        open_view(b, d, "#/models")
        b.wait_for("document.querySelectorAll('#models tbody tr').length === 5")
        cell = b.eval("""[...document.querySelectorAll('#models tbody tr')]
            .find(r => r.cells[0].textContent === 'slow').cells[1].textContent""")
        assert cell.startswith("hashing") and "0/1 files" in cell
        assert b.eval("!!document.querySelector('#models progress')")
        shot(b, "models-hashing-1280")
        open_view(b, d, "#/model/slow")
        b.wait_for("document.querySelector('#files')")
        assert "hashing" in b.eval("document.querySelector('#files tbody').textContent")
        assert_clean(b)
    finally:
        desktop.goto("about:blank")  # its polls would fail once the daemon is gone
        d.stop_checked()


def test_mirror_console(tmp_path, desktop):
    """A mirror's console: its upstream and that it answers, its cache (used
    of its cap, files, the hit ratio), each repo it knows with the share of
    it the cache holds, in the model list too; a mirrored repo's page is a
    model's (its tensors, the share cached)."""
    import numpy as np
    from test_mirror import Upstream, start_mirror
    up = Upstream(str(tmp_path / "up"))
    up.add("acme/sharded-lm", np.random.default_rng(1), shards=2, elems=1 << 16)
    up.d.start()
    m = None
    try:
        m = start_mirror(up, str(tmp_path / "m"))
        # One tensor read: the cache holds part of the repo.
        assert m.get("/v1/models/acme/sharded-lm/tensors/l1.t0").status == 200
        b = desktop
        open_view(b, m, "#/mirror")
        b.wait_for("document.querySelector('#mirror-repos tbody a')")
        assert b.eval("!document.getElementById('nav-mirror').parentElement.hidden")
        upstream = b.eval("document.getElementById('upstream').textContent")
        assert f"http://127.0.0.1:{up.d.port}" in upstream and "answering" in upstream
        cache = b.eval("document.getElementById('cache').textContent")
        assert "of 100 GiB" in cache and "complete" in cache and "Hit ratio" in cache
        row = b.eval("[...document.querySelector('#mirror-repos tbody tr').cells].map(c => c.textContent)")
        assert row[0] == "acme/sharded-lm" and re.fullmatch(r"[0-9a-f]{12}", row[1])
        pct = float(re.search(r"([0-9.]+)%", row[2]).group(1))
        assert 0 < pct < 100, row
        shot(b, "mirror-1280")
        open_view(b, m, "#/models")
        b.wait_for("document.querySelectorAll('#models tbody tr').length === 1")
        cell = b.eval("document.querySelector('#models tbody tr').cells[1].textContent")
        assert cell.startswith("mirrored") and "% cached" in cell
        open_view(b, m, "#/model/" + urllib.parse.quote("acme/sharded-lm", safe=""))
        b.wait_for("document.querySelector('#tensors .vrow') && document.getElementById('model-cached')")
        assert "cached" in b.eval("document.getElementById('model-cached').textContent")
        shot(b, "mirror-model-1280")
        assert_clean(b)
    finally:
        desktop.goto("about:blank")
        if m:
            m.stop_checked()
        up.d.stop()


def test_token_from_the_page(tmp_path):
    """With auth on, the page loads without a token and asks for one; the
    token typed in is sent as a bearer token; a write with the read token
    says it needs the admin token."""
    root = tmp_path / "models"
    gen_models.make_demo_models(str(root))
    tokens = tmp_path / "tokens"
    tokens.write_text("read read-secret-0123456789\nadmin admin-secret-0123456789\n")
    d = tdutil.Daemon(str(root), str(tmp_path), ["--auth-token-file", str(tokens)],
                      probe_headers={"Authorization": "Bearer read-secret-0123456789"}).start()
    try:
        assert d.get("/ui/").status == 200
        with cdp.Browser(1280, 800) as b:
            open_view(b, d, "#/models")
            b.wait_for("/token/.test(document.getElementById('status').textContent)")
            b.eval("document.getElementById('token').value = 'read-secret-0123456789'")
            b.eval("document.getElementById('token-form').requestSubmit()")
            b.wait_for("document.querySelectorAll('#models tbody tr').length === 4")
            open_view(b, d, "#/gpu")
            b.wait_for("document.querySelector('#preload-model option[value=\"demo-f32\"]')")
            b.eval("document.getElementById('preload-device').value = 'host'")
            b.eval("document.getElementById('preload').click()")
            b.wait_for("/admin token/.test(document.getElementById('status').textContent)")
            shot(b, "auth-needs-admin-1280")
            # The refused requests are logged by the browser itself, as 401s.
            assert b.errors(allow=("status of 401",)) == []
    finally:
        d.stop_checked()


def test_ui_can_be_turned_off(tmp_path):
    root = tmp_path / "models"
    gen_models.make_demo_models(str(root))
    d = tdutil.Daemon(str(root), str(tmp_path), ["--ui", "false"]).start()
    try:
        for path in ("/ui/", "/ui/app.js", "/ui"):
            r = d.get(path)
            assert r.status == 404 and json.loads(r.body)["error"]["code"] == "not_found", path
        assert d.get("/v1/models").status == 200
    finally:
        d.stop_checked()
