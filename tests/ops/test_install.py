"""`make install` puts the binary, client library, man page, config and unit
under DESTDIR/PREFIX, and never overwrites an operator's edited config."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def install(dest):
    return subprocess.run(["make", "--no-print-directory", "install", f"DESTDIR={dest}",
                           "PREFIX=/usr/local"], cwd=ROOT, capture_output=True, text=True)


def test_install_layout_and_config_kept(tmp_path):
    p = install(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    for rel in ("usr/local/bin/tensord", "usr/local/bin/tensord-client",
                "usr/local/lib/libtensord-client.so.0", "usr/local/include/tensord_client.h",
                "usr/local/share/man/man8/tensord.8",
                "usr/local/lib/systemd/system/tensord.service",
                "usr/local/share/doc/tensord/OPERATIONS.md", "etc/tensord/tensord.conf"):
        assert os.path.exists(tmp_path / rel), rel
    assert os.access(tmp_path / "usr/local/bin/tensord", os.X_OK)
    conf = tmp_path / "etc/tensord/tensord.conf"
    conf.write_text("# edited by the operator\n")
    p = install(tmp_path)
    assert p.returncode == 0
    assert conf.read_text() == "# edited by the operator\n"
