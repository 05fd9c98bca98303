"""`profinfer-perfetto open`: serve a trace on localhost until ui.perfetto.dev has fetched it.

Done as Perfetto's own `tools/open_trace_in_ui` does it: an HTTP server on 127.0.0.1 answers
the UI's GET for the file with `Access-Control-Allow-Origin: https://ui.perfetto.dev` (and
`Cache-Control: no-cache`), any other path or a POST with 404, and the UI is opened on
`https://ui.perfetto.dev/#!/?url=http://127.0.0.1:PORT/NAME`. Port 9001 is the one the UI's
Content-Security-Policy lets it fetch from (trace_processor_shell's HTTP port). Only the UI's
origin, asking for the server by its loopback name (Host 127.0.0.1 or localhost, at PORT or at
9001 forwarded to it), gets the file or a preflight: any other is refused with 403 (a page that
rebinds its own name to 127.0.0.1, another page).
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import sys
import threading
import webbrowser
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated
from urllib.parse import quote, unquote, urlsplit

import typer

from profinfer_perfetto.errors import ExitCode, ProfinferError

UI_ORIGIN = "https://ui.perfetto.dev"
HOST = "127.0.0.1"
DEFAULT_PORT = 9001


def ui_url(port: int, name: str) -> str:
    """The UI, told to load the trace served at `port` under `name`."""
    return f"{UI_ORIGIN}/#!/?url=http://{HOST}:{port}/{quote(name)}"


def how_to_reach(port: int) -> str:
    """One sentence: how a browser gets at a trace served here on `port`."""
    forward = f"`ssh -L {DEFAULT_PORT}:{HOST}:{port} {socket.gethostname()}`"
    if port == DEFAULT_PORT:
        return f"open it in a browser on this machine, or on another one after {forward}"
    return (f"ui.perfetto.dev fetches traces only from port {DEFAULT_PORT} (its "
            f"Content-Security-Policy): forward it with {forward} and put {DEFAULT_PORT} "
            "in the URL")


class _TraceServer(ThreadingHTTPServer):
    """Serves one file, at /NAME, to the UI's origin; `fetched` is set once it went out whole."""

    allow_reuse_port = False  # a second server on a port in use must fail to bind, not share it

    def __init__(self, port: int, trace: Path) -> None:
        self.trace = trace
        self.fetched = threading.Event()
        super().__init__((HOST, port), _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        print(f"profinfer-perfetto: a request from the browser failed: {sys.exc_info()[1]}",
              file=sys.stderr)


class _Handler(BaseHTTPRequestHandler):
    server: _TraceServer

    def end_headers(self) -> None:
        self.send_header("Access-Control-Allow-Origin", UI_ORIGIN)
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def _refused(self) -> bool:
        """Refuse (403) a request that is not the UI's, to this server by its loopback name:
        another Host is a page that rebound its name to 127.0.0.1, another Origin another
        page; neither may take the single fetch."""
        port = self.server.server_address[1]
        hosts = {f"{name}:{p}" for name in (HOST, "localhost") for p in (port, DEFAULT_PORT)}
        if self.headers.get("Host") in hosts and self.headers.get("Origin") == UI_ORIGIN:
            return False
        self.send_error(HTTPStatus.FORBIDDEN)
        return True

    def do_GET(self) -> None:
        if self._refused():
            return
        if unquote(urlsplit(self.path).path) != "/" + self.server.trace.name:
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        with self.server.trace.open("rb") as data:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(os.fstat(data.fileno()).st_size))
            self.end_headers()
            shutil.copyfileobj(data, self.wfile)
        self.server.fetched.set()

    def do_POST(self) -> None:
        """The UI probes POST /status for a trace_processor RPC server: there is none here."""
        self.send_error(HTTPStatus.NOT_FOUND)

    def do_OPTIONS(self) -> None:
        """A CORS preflight, with Private Network Access (a public page asking for 127.0.0.1)."""
        if self._refused():
            return
        self.send_response(HTTPStatus.NO_CONTENT)
        self.send_header("Access-Control-Allow-Methods", "GET, OPTIONS")
        if requested := self.headers.get("Access-Control-Request-Headers"):
            self.send_header("Access-Control-Allow-Headers", requested)
        if self.headers.get("Access-Control-Request-Private-Network") == "true":
            self.send_header("Access-Control-Allow-Private-Network", "true")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the command says itself when the trace was served."""


@dataclass
class OpenCommand:
    """Serve a trace on 127.0.0.1 until ui.perfetto.dev has fetched it, and open the UI on it."""

    trace: Path
    port: int = DEFAULT_PORT
    browser: bool = True
    timeout_s: float | None = None

    @staticmethod
    def cli(
        trace: Annotated[Path, typer.Argument(help="The trace to open.", readable=False)],
        port: Annotated[
            int, typer.Option(help="Port to serve it on, on 127.0.0.1 (ui.perfetto.dev fetches "
                              "only from 9001).", min=1, max=65535)
        ] = DEFAULT_PORT,
        browser: Annotated[
            bool, typer.Option("--browser/--no-browser", help="Open the browser (otherwise "
                               "print the URL and how to reach it).")
        ] = True,
        timeout: Annotated[
            float | None,
            typer.Option(help="Stop serving after this many seconds (exit 2 if not fetched).",
                         min=0.0),
        ] = None,
    ) -> int:
        """The options, checked: the command to run."""
        return OpenCommand(trace, port, browser, timeout).run()

    def run(self) -> int:
        _check_readable(self.trace)
        with _listen(self.port, self.trace) as server:
            threading.Thread(target=server.serve_forever, daemon=True).start()
            try:
                self._show(ui_url(self.port, self.trace.name))
                fetched = server.fetched.wait(self.timeout_s)
            finally:
                server.shutdown()
        return self._report(fetched)

    def _show(self, url: str) -> None:
        serving = f"serving {self.trace} on {HOST}:{self.port} until it is fetched (Ctrl-C to stop)"
        if self.browser and _open_browser(url):
            print(f"profinfer-perfetto: opened {url}, {serving}", file=sys.stderr)
            if self.port != DEFAULT_PORT:
                print(f"profinfer-perfetto: {how_to_reach(self.port)}", file=sys.stderr)
            return
        print(url, flush=True)
        print(f"profinfer-perfetto: {how_to_reach(self.port)}; {serving}", file=sys.stderr)

    def _report(self, fetched: bool) -> int:
        if not fetched:
            raise ProfinferError(f"{self.trace} was not fetched within {self.timeout_s:g} s")
        print(f"profinfer-perfetto: served {self.trace} to the UI", file=sys.stderr)
        return ExitCode.OK


def _check_readable(trace: Path) -> None:
    try:
        regular = stat.S_ISREG(trace.stat().st_mode)
        if regular:  # not opened otherwise: opening a FIFO would wait for a writer
            trace.open("rb").close()
    except FileNotFoundError:
        raise ProfinferError(f"no such file: {trace}") from None
    except OSError as exc:
        raise ProfinferError(f"cannot read {trace}: {exc.strerror}") from None
    if not regular:
        raise ProfinferError(f"{trace} is not a regular file")


def _listen(port: int, trace: Path) -> _TraceServer:
    try:
        return _TraceServer(port, trace)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ProfinferError(
                f"port {port} on {HOST} is already in use (another server, a trace_processor_shell "
                "--httpd perhaps): stop it or serve on another port with --port") from None
        raise ProfinferError(f"cannot listen on {HOST}:{port}: {exc.strerror}") from None


def _open_browser(url: str) -> bool:
    """Open `url` in the user's browser; False where there is none (headless Linux, none found)."""
    if sys.platform == "linux" and not (os.environ.get("DISPLAY")
                                        or os.environ.get("WAYLAND_DISPLAY")):
        return False
    try:
        return webbrowser.get().open_new_tab(url)
    except webbrowser.Error:
        return False
