"""`profinfer-perfetto open`: the trace served once on loopback to ui.perfetto.dev's origin.

The command runs as a subprocess; the tests play the UI's part with urllib on 127.0.0.1 (the UI
itself is never contacted). Every wait is bounded by the command's --timeout or a wait timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from pathlib import Path
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest

from profinfer_perfetto.commands.open import UI_ORIGIN, how_to_reach, ui_url
from tests.conftest import Cli

WAIT_S = 60.0
LAUNCH = (sys.executable, "-m", "profinfer_perfetto")
# The CLI with Ctrl-C's KeyboardInterrupt even where the test runner's SIGINT is ignored (as in a
# background job), since a child inherits an ignored SIGINT and Python then leaves it ignored.
LAUNCH_INTERRUPTIBLE = (sys.executable, "-c", "import signal; "
                        "signal.signal(signal.SIGINT, signal.default_int_handler); "
                        "from profinfer_perfetto.cli import main; main()")
# Stands in for the user's browser (BROWSER=this script): fetches what the UI would, as the UI.
FAKE_BROWSER = f"""#!{sys.executable}
import os, sys, urllib.request
url = sys.argv[1].split("?url=", 1)[1]
request = urllib.request.Request(url, headers={{"Origin": "https://ui.perfetto.dev"}})
with urllib.request.urlopen(request, timeout={WAIT_S}) as response:
    open(os.environ["FAKE_BROWSER_OUT"], "wb").write(response.read())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "run.pftrace"
    path.write_bytes(os.urandom(300_000))
    return path


@contextmanager
def serving(trace: Path, *args: str, env: dict[str, str] | None = None,
            launch: tuple[str, ...] = LAUNCH) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`open TRACE ARGS` running, and the trace URL out of the UI URL it printed."""
    cmd = [*launch, "open", str(trace), "--timeout", str(WAIT_S), *args]
    with subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            prefix = f"{UI_ORIGIN}/#!/?url="
            assert url.startswith(prefix), (url, proc.stderr.read() if proc.stderr else "")
            yield proc, url.removeprefix(prefix)
        finally:
            if proc.poll() is None:
                proc.kill()


def fetch(url: str, method: str = "GET", **headers: str) -> tuple[int, Message, bytes]:
    request = Request(url, method=method, headers={"Origin": UI_ORIGIN, **headers})
    try:
        with urlopen(request, timeout=WAIT_S) as response:
            return response.status, response.headers, response.read()
    except HTTPError as error:
        return error.code, error.headers, error.read()


def finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=WAIT_S)
    return proc.returncode, out, err


def test_the_trace_is_served_once_to_the_ui_then_it_exits(trace: Path) -> None:
    port = free_port()
    with serving(trace, "--no-browser", "--port", str(port)) as (proc, url):
        assert url == f"http://127.0.0.1:{port}/run.pftrace"
        status, headers, body = fetch(url)
        code, out, err = finished(proc)
    assert status == 200 and body == trace.read_bytes()
    assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
    assert headers["Content-Length"] == str(len(body))
    assert code == 0, err
    assert out == "" and "served" in err


def test_a_preflight_and_the_uis_rpc_probe_leave_it_serving(tmp_path: Path) -> None:
    trace = tmp_path / "my run.pftrace"
    trace.write_bytes(b"\x0a\x00" * 1000)
    with serving(trace, "--no-browser", "--port", str(free_port())) as (proc, url):
        assert url.endswith("/my%20run.pftrace")
        status, headers, _ = fetch(url, "OPTIONS", **{
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "range",
            "Access-Control-Request-Private-Network": "true"})
        assert status == 204
        assert headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        assert "GET" in headers["Access-Control-Allow-Methods"]
        assert headers["Access-Control-Allow-Headers"] == "range"
        assert headers["Access-Control-Allow-Private-Network"] == "true"
        probe = url.rsplit("/", 1)[0] + "/status"
        status, headers, _ = fetch(probe, "POST")
        assert status == 404 and headers["Access-Control-Allow-Origin"] == UI_ORIGIN
        assert fetch(probe)[0] == 404
        assert proc.poll() is None
        status, _, body = fetch(url)
        code, _, err = finished(proc)
    assert status == 200 and body == trace.read_bytes()
    assert code == 0, err


def test_without_a_display_it_prints_the_url_instead_of_opening_a_browser(trace: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    with serving(trace, "--port", str(free_port()), env=env) as (proc, url):
        assert fetch(url)[0] == 200
        code, _, err = finished(proc)
    assert code == 0, err
    assert "ssh -L 9001:127.0.0.1:" in err


def test_the_browser_is_opened_on_the_ui_url(trace: Path, tmp_path: Path) -> None:
    browser = tmp_path / "browser"
    browser.write_text(FAKE_BROWSER)
    browser.chmod(0o755)
    got = tmp_path / "got"
    env = {**os.environ, "DISPLAY": ":0", "BROWSER": str(browser), "FAKE_BROWSER_OUT": str(got)}
    port = free_port()
    result = subprocess.run([*LAUNCH, "open", str(trace), "--port", str(port), "--timeout",
                             str(WAIT_S)], env=env, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=2 * WAIT_S, check=False)
    assert result.returncode == 0, result.stderr
    assert got.read_bytes() == trace.read_bytes()
    assert result.stdout == ""
    assert f"opened {ui_url(port, trace.name)}" in result.stderr


def test_ctrl_c_stops_it_with_130(trace: Path) -> None:
    with serving(trace, "--no-browser", "--port", str(free_port()),
                 launch=LAUNCH_INTERRUPTIBLE) as (proc, _):
        proc.send_signal(signal.SIGINT)
        code, _, err = finished(proc)
    assert code == 130
    assert "Traceback" not in err


def test_nobody_fetching_it_ends_at_the_timeout(cli: Cli, trace: Path) -> None:
    result = cli("open", trace, "--no-browser", "--port", free_port(), "--timeout", "0.1")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (f"profinfer-perfetto: {trace} was not fetched "
                                              "within 0.1 s")


def one_sentence(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("profinfer-perfetto: "), result.stderr
    return lines[0]


def test_a_missing_file_is_one_sentence(cli: Cli, tmp_path: Path) -> None:
    line = one_sentence(cli("open", tmp_path / "nope.pftrace", "--no-browser"))
    assert "no such file" in line and "nope.pftrace" in line


def test_a_directory_is_one_sentence(cli: Cli, tmp_path: Path) -> None:
    assert "is not a regular file" in one_sentence(cli("open", tmp_path, "--no-browser"))


def test_an_unreadable_file_is_one_sentence(cli: Cli, trace: Path) -> None:
    trace.chmod(0)
    user = "65534" if os.geteuid() == 0 else None  # root reads a file whatever its mode
    line = one_sentence(cli("open", trace, "--no-browser", user=user))
    assert "cannot read" in line and "Permission denied" in line


def test_a_port_in_use_is_one_sentence(cli: Cli, trace: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = one_sentence(cli("open", trace, "--no-browser", "--port", port, "--timeout",
                                str(WAIT_S), timeout=WAIT_S))
    assert f"port {port} " in line and "already in use" in line and "--port" in line


def test_the_url_and_the_way_there() -> None:
    assert ui_url(9001, "a b.pftrace") == (
        "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/a%20b.pftrace")
    assert "ssh -L 9001:127.0.0.1:9001 " in how_to_reach(9001)
    elsewhere = how_to_reach(9002)
    assert "ssh -L 9001:127.0.0.1:9002 " in elsewhere and "only from port 9001" in elsewhere
