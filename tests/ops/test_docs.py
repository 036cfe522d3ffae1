"""The man page renders without groff warnings and covers what operators
look for; the operations guide covers deployment, scraping and reloads."""
import os
import subprocess

from conftest import ROOT, tool

MAN = os.path.join(ROOT, "docs", "tensord.8")


def test_man_page_renders_cleanly():
    groff = tool("groff")
    p = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", MAN], capture_output=True,
                       text=True)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
    man = tool("man")
    p = subprocess.run([man, "-l", MAN], capture_output=True, text=True,
                       env={**os.environ, "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80"})
    assert p.returncode == 0, p.stderr
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "CONFIGURATION",
                    "SIGNALS", "FILES", "SEE ALSO"]:
        assert f"\n{section}\n" in p.stdout, section
    for word in ["SIGHUP", "SIGTERM", "inspect", "serve", "--print-config",
                 "/etc/tensord/tensord.conf"]:
        assert word in p.stdout, word


def test_operations_guide_sections():
    text = open(os.path.join(ROOT, "docs", "OPERATIONS.md")).read()
    for needle in ["systemctl reload tensord", "docker run", "scrape_configs", "tensord-gpu.conf",
                   "SIGHUP", "access_log", "systemd-analyze security"]:
        assert needle in text, needle
