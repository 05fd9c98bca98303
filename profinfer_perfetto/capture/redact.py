"""The target's command line as a trace may keep it: the values of secret-bearing options hidden.

Traces are made to be shared (ui.perfetto.dev links, issue attachments), and a server's command
line can hold its API key or a Hugging Face token. An option whose name holds `token`, `key`,
`secret` or `password` (`--api-key`, `--hf-token`) has its value, the next argument or the part
after `=`, replaced by REDACTED; one that names a file (`--api-key-file`) keeps its path, and the
file is never read. An option that follows one of them (`--`...) is taken as such, not as its
value. The environment is never recorded.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"token|key|secret|passw(or)?d", re.IGNORECASE)
_SHORT_SECRETS = frozenset({"-hft"})
"""Short forms of secret-bearing options (llama.cpp's -hft, --hf-token)."""


def _is_secret(option: str) -> bool:
    if option in _SHORT_SECRETS:
        return True
    name = option.lstrip("-")
    return (option.startswith("-") and bool(_SECRET_NAME.search(name))
            and not name.lower().endswith(("file", "path")))


def redact(cmdline: list[str]) -> list[str]:
    """`cmdline` with the value of every secret-bearing option replaced by REDACTED."""
    out: list[str] = []
    hide_next = False
    for arg in cmdline:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        option, equals, _ = arg.partition("=")
        hide_next = not equals and _is_secret(arg)
        out.append(f"{option}={REDACTED}" if equals and _is_secret(option) else arg)
    return out
