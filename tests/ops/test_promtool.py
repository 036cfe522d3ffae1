"""The Prometheus exposition passes `promtool check metrics` (syntax and the
naming lints: units, _total suffixes, HELP on every family).

tests/unit/test_metrics.c writes a populated rendering to the file named by
TENSORD_METRICS_DUMP; it is built here straight from core/runtime/metrics*.c (and
server/http/http_metrics.c, which names the endpoints) so this check does not
depend on the rest of the tree building."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, tool


@pytest.fixture(scope="module")
def exposition(tmp_path_factory):
    cc = os.environ.get("CC", "cc")
    if not shutil.which(cc):
        pytest.skip("no C compiler")
    tmp = tmp_path_factory.mktemp("promtool")
    exe, dump = tmp / "test_metrics", tmp / "metrics.prom"
    subprocess.run([cc, "-std=c11", "-pthread", "-D_GNU_SOURCE", '-DTENSORD_VERSION="0.1.0"',
                    "-Icore/base", "-Icore/runtime", "-Iserver/http", "-Itests/unit", "-o",
                    str(exe), "tests/unit/test_metrics.c", "core/runtime/metrics.c",
                    "core/runtime/metrics_render.c", "core/base/strbuf.c", "core/base/util.c",
                    "server/http/http_metrics.c", "-lm"],
                   cwd=ROOT, check=True)
    p = subprocess.run([str(exe)], env={**os.environ, "TENSORD_METRICS_DUMP": str(dump)},
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return dump.read_text()


def test_promtool_check_metrics(exposition):
    promtool = tool("promtool")
    p = subprocess.run([promtool, "check", "metrics"], input=exposition, capture_output=True,
                       text=True)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), \
        p.stdout + p.stderr


def test_expected_families(exposition):
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", exposition, re.M))
    want = {
        "tensord_http_requests_total": "counter",
        "tensord_http_response_bytes_total": "counter",
        "tensord_http_request_duration_seconds": "histogram",
        "tensord_http_time_to_first_byte_seconds": "histogram",
        "tensord_http_requests_in_flight": "gauge",
        "tensord_http_connections_open": "gauge",
        "tensord_models": "gauge", "tensord_models_invalid": "gauge", "tensord_files": "gauge",
        "tensord_tensors": "gauge", "tensord_model_file_bytes": "gauge",
        "tensord_mapped_bytes": "gauge",
        "tensord_registry_reloads_total": "counter",
        "tensord_registry_reload_errors_total": "counter",
        "tensord_http_range_requests_total": "counter",
        "tensord_http_multirange_requests_total": "counter",
        "tensord_slice_requests_total": "counter",
        "tensord_http_not_modified_total": "counter",
        "tensord_http_range_not_satisfiable_total": "counter",
        "tensord_sent_bytes_total": "counter",
        "tensord_gpu_resident_bytes": "gauge", "tensord_gpu_leases_active": "gauge",
        "tensord_gpu_preload_bytes_per_second": "gauge",
        "tensord_uptime_seconds": "gauge", "tensord_build_info": "gauge",
        "tensord_hash_bytes_total": "counter", "tensord_hash_files_total": "counter",
        "tensord_hash_errors_total": "counter", "tensord_hash_files_pending": "gauge",
        "tensord_hash_pending_bytes": "gauge", "tensord_hash_files_known": "gauge",
        "tensord_hash_files": "gauge",
    }
    for name, kind in want.items():
        assert types.get(name) == kind, name
    assert 'tensord_http_request_duration_seconds_bucket{endpoint="tensor",le="0.0001"}' \
        in exposition
    assert 'tensord_http_request_duration_seconds_bucket{endpoint="tensor",le="10"}' in exposition
    assert 'tensord_sent_bytes_total{method="sendfile"}' in exposition
    assert 'tensord_sent_bytes_total{method="copy"}' in exposition
    assert re.search(r'^tensord_build_info\{version="[^"]+"\} 1$', exposition, re.M)


def test_scrape_config_in_docs_is_valid(tmp_path):
    """The sample scrape configuration in docs/OPERATIONS.md loads in promtool."""
    promtool = tool("promtool")
    text = open(os.path.join(ROOT, "docs", "OPERATIONS.md")).read()
    m = re.search(r"```yaml\n(# prometheus.yml.*?)```", text, re.S)
    assert m, "docs/OPERATIONS.md has no ```yaml block starting with '# prometheus.yml'"
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(m.group(1))
    p = subprocess.run([promtool, "check", "config", str(cfg)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
