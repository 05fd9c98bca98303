"""`open` gives the trace only to ui.perfetto.dev asking for it by its loopback name: not to a
page that rebinds its own name to 127.0.0.1 (DNS rebinding), nor to another origin (real HTTP
requests to the command's server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from profinfer_perfetto.commands.open import UI_ORIGIN
from tests.unit.test_open import fetch, finished, free_port, serving

PREFLIGHT = {"Access-Control-Request-Method": "GET",
             "Access-Control-Request-Private-Network": "true"}


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "run.pftrace"
    path.write_bytes(b"\x0a\x00" * 1000)
    return path


def test_another_host_or_origin_is_refused_and_the_ui_still_gets_it(trace: Path) -> None:
    port = free_port()
    with serving(trace, "--no-browser", "--port", str(port)) as (proc, url):
        refused = [fetch(url, Host=f"attacker.example:{port}"),
                   fetch(url, Host=f"attacker.example:{port}", method="OPTIONS", **PREFLIGHT),
                   fetch(url, Origin="https://attacker.example"),
                   fetch(url, Origin="https://attacker.example", method="OPTIONS", **PREFLIGHT)]
        assert [status for status, _, _ in refused] == [403] * 4
        assert all("Access-Control-Allow-Private-Network" not in headers
                   for _, headers, _ in refused)
        assert all(body != trace.read_bytes() for _, _, body in refused)
        assert proc.poll() is None
        status, headers, _ = fetch(url.replace("127.0.0.1", "localhost"), "OPTIONS",
                                   **PREFLIGHT)
        assert status == 204 and headers["Access-Control-Allow-Private-Network"] == "true"
        status, headers, body = fetch(url)
        code, _, err = finished(proc)
    assert status == 200 and body == trace.read_bytes()
    assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    assert code == 0, err
