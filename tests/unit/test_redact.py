"""The command line a trace keeps: the values of secret-bearing options hidden, the rest kept."""

from __future__ import annotations

import pytest

from profinfer_perfetto.capture.redact import REDACTED, redact


@pytest.mark.parametrize("option", ["--api-key", "--hf-token", "-hft", "--db-password",
                                    "--client-secret", "--API_KEY", "--passwd"])
def test_a_secret_option_s_value_is_hidden_in_both_spellings(option: str) -> None:
    assert redact(["llama-server", option, "s3cret", "-m", "m.gguf"]) == [
        "llama-server", option, REDACTED, "-m", "m.gguf"]
    assert redact(["llama-server", f"{option}=s3cret", "--port", "8080"]) == [
        "llama-server", f"{option}={REDACTED}", "--port", "8080"]


def test_an_option_naming_a_file_keeps_its_path() -> None:
    cmdline = ["llama-server", "--api-key-file", "/etc/keys", "--ssl-key-file=/etc/tls.key"]
    assert redact(cmdline) == cmdline


def test_other_options_and_the_program_are_kept() -> None:
    cmdline = ["/opt/keyserver/llama-cli", "-m", "m.gguf", "-p", "a token", "-n", "16", "--keep",
               "4"]
    assert redact(cmdline) == cmdline


def test_an_option_after_a_secret_one_is_not_taken_for_its_value() -> None:
    assert redact(["x", "--no-key", "--api-key", "s3cret", "--hf-token"]) == [
        "x", "--no-key", "--api-key", REDACTED, "--hf-token"]


def test_every_secret_is_gone() -> None:
    cmdline = ["srv", "--api-key", "k1,k2", "--hf-token=hf_abc", "-hft", "hf_def"]
    assert not any(s in " ".join(redact(cmdline)) for s in ("k1", "hf_abc", "hf_def"))
