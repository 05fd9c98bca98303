"""This machine's roofs: its memory bandwidth and its matmul FLOP/s per weight type, at 1..N
threads, measured by `profinfer-perfetto calibrate`, stored as JSON, and written into every
trace `record` makes afterwards (the `roofline` metric reads them from there, so a trace keeps
the roofs of the machine it was recorded on).

- Memory: STREAM's Copy kernel (each thread copies its share of an array of `mib` MiB into
  another; bytes read plus bytes written over the time of the slowest thread, best of
  `repeats`), with numpy, whose copy loop runs without the GIL.
- Compute: ggml's own kernels, as llama-bench runs them on a model: a 512-token prompt's tokens/s
  times 2 FLOPs per matmul weight (every weight matrix but the token embedding, which is looked
  up, and the output, which a prompt computes for its last token only; of a Mixture-of-Experts
  layer's experts, the share a token is routed to); labelled with the
  model's main weight type (the type holding most of those weights' bytes). Attention's own
  FLOPs are left out, so the roof is a little low.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import pwd
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.files import write_whole

PEAKS_ENV = "PROFINFER_PEAKS"
FORMAT = 1
_LOOKED_UP = ("token_embd.weight", "output.weight")
"""Weights a prompt's tokens do not multiply: the embedding (rows looked up) and the output
(computed for the prompt's last token only)."""


class PeakKind(StrEnum):
    MEMORY = "memory"
    """GB/s"""
    COMPUTE = "compute"
    """GFLOP/s of matmuls with weights of `dtype`"""


@dataclass(frozen=True)
class Peak:
    kind: PeakKind
    threads: int
    value: float
    """GB/s (memory) or GFLOP/s (compute)."""
    dtype: str = ""
    """The weight type (ggml's name, e.g. q4_K) of a compute peak."""
    how: str = ""


@dataclass
class Peaks:
    peaks: list[Peak] = field(default_factory=list)
    machine: str = ""
    measured: str = ""

    def save(self, path: Path) -> None:
        """Written whole or not at all."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ProfinferError(f"cannot write {path}: {exc.strerror}") from None
        write_whole(path, json.dumps({"format": FORMAT, "machine": self.machine,
                                      "measured": self.measured,
                                      "peaks": [asdict(p) for p in self.peaks]}, indent=1)
                    + "\n")


_CACHED = Path("profinfer-perfetto", "peaks.json")
"""Where in a user's cache folder calibrate stores the peaks."""


def default_path() -> Path:
    """Where calibrate stores the peaks and record looks for them first: $PROFINFER_PEAKS, else
    the user's cache."""
    if os.environ.get(PEAKS_ENV):
        return Path(os.environ[PEAKS_ENV])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / _CACHED


MAX_BYTES = 1 << 20
"""A peaks file is a few KiB: a larger one is no such file (nor read whole)."""


def search_paths() -> list[Path]:
    """Where record looks for stored peaks: default_path(), then, as root under sudo (which
    resets HOME and $PROFINFER_PEAKS), the invoking user's cache, where their calibrate
    stored them."""
    paths = [default_path()]
    user = os.environ.get("SUDO_USER")
    if user and os.geteuid() == 0:
        with contextlib.suppress(KeyError):  # a user the password database does not know
            paths.append(Path(pwd.getpwnam(user).pw_dir) / ".cache" / _CACHED)
    return list(dict.fromkeys(paths))


def stored() -> tuple[Peaks, str | None]:
    """The peaks calibrate stored, from the first of search_paths() that holds a file; else
    none, and a note that says where they were looked for."""
    paths = search_paths()
    for path in paths:
        try:
            if path.is_file():
                return load(path), None
        except OSError:  # a folder this user may not look in
            continue
    where = " or ".join(map(str, paths))
    return Peaks(), (f"no roofs in the trace: no `calibrate` peaks at {where} (give --peaks "
                     f"FILE or set ${PEAKS_ENV})")


def for_record(path: Path | None) -> tuple[tuple[Peak, ...], str | None]:
    """The roofs record writes into its trace: those in `path` (--peaks), else the stored ones;
    where there are none, a note that says where they were looked for."""
    if path is not None:
        return tuple(load(path).peaks), None
    peaks, note = stored()
    return tuple(peaks.peaks), note


def load(path: Path) -> Peaks:
    """Peaks stored by calibrate; one sentence if the file is not such."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise ValueError(f"over {MAX_BYTES >> 20} MiB")
        data = json.loads(raw)
    except OSError as exc:
        raise ProfinferError(f"cannot read the peaks in {path}: {exc.strerror}") from None
    except (ValueError, RecursionError) as exc:
        raise ProfinferError(f"{path} holds no peaks of `profinfer-perfetto calibrate` "
                             f"({str(exc)[:80]})") from None
    wrong = _wrong(data)
    if wrong:
        raise ProfinferError(f"{path} holds no peaks of `profinfer-perfetto calibrate` ({wrong})")
    peaks = [Peak(PeakKind(p["kind"]), p["threads"], float(p["value"]), p.get("dtype", ""),
                  p.get("how", "")) for p in data["peaks"]]
    return Peaks(peaks, str(data.get("machine", "")), str(data.get("measured", "")))


def _wrong(data: Any) -> str | None:
    """What keeps a peaks file's JSON from being calibrate's, if anything."""
    if not isinstance(data, dict):
        return "its top level is not an object"
    if data.get("format") != FORMAT:
        return f"format {data.get('format')!r:.30}, not {FORMAT}"
    if not isinstance(data.get("peaks"), list):
        return "its peaks are not a list"
    for p in data["peaks"]:
        if not isinstance(p, dict) or p.get("kind") not in tuple(PeakKind):
            return f"a peak of no kind {'/'.join(PeakKind)}: {p!r:.60}"
        threads, value = p.get("threads"), p.get("value")
        if not isinstance(threads, int) or isinstance(threads, bool) or not 0 < threads < 1 << 20:
            return f"a peak's threads {threads!r:.30} is not a count of threads"
        if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
            return f"a peak's value {value!r:.30} is not a number of 0 or more"
        if not all(isinstance(p.get(k, ""), str) for k in ("dtype", "how")):
            return "a peak's dtype or how is not a string"
    return None


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo()
                  if line.startswith("model name")), platform.processor())
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def memory_peak(threads: int, mib: int = 256, repeats: int = 5) -> Peak:
    """STREAM Copy bandwidth of `threads` threads (see the module's doc)."""
    n = mib * 2**20 // 8
    source, target = np.ones(n), np.zeros(n)
    bounds = np.linspace(0, n, threads + 1).astype(int).tolist()
    start = threading.Barrier(threads)
    spans = np.zeros((repeats, threads, 2))

    def copy(part: int) -> None:
        lo, hi = bounds[part], bounds[part + 1]
        for r in range(repeats):
            start.wait()
            spans[r, part, 0] = time.perf_counter()
            np.copyto(target[lo:hi], source[lo:hi])
            spans[r, part, 1] = time.perf_counter()

    # The threads time themselves: a waiting main thread could get its CPU only after them.
    workers = [threading.Thread(target=copy, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    best = float((spans[:, :, 1].max(1) - spans[:, :, 0].min(1)).min())
    return Peak(PeakKind.MEMORY, threads, round(2 * 8 * n / best / 1e9, 2),
                how=f"STREAM copy, numpy, {mib} MiB arrays, best of {repeats}")


def ggml_type_name(gguf_name: str) -> str:
    """ggml's name of a GGUF tensor type (Q4_K -> q4_K, IQ2_XXS -> iq2_xxs, F32 -> f32)."""
    name = gguf_name.lower()
    return name[:-2] + "_K" if name.endswith("_k") else name


def matmul_weights(model: Path) -> tuple[int, str]:
    """The weights each of a prompt's tokens multiplies (see _LOOKED_UP; of a Mixture-of-Experts
    layer's experts, the share each token uses), and their main type."""
    from gguf import GGUFReader  # only calibrate reads models

    try:
        reader = GGUFReader(model)
        arch = reader.fields["general.architecture"].contents()
        experts = {name: reader.fields[f"{arch}.{name}"].contents()
                   for name in ("expert_count", "expert_used_count")
                   if f"{arch}.{name}" in reader.fields}
    except (OSError, ValueError, KeyError) as exc:
        raise ProfinferError(f"cannot read {model} as a GGUF model ({exc})") from None
    used = (experts["expert_used_count"] / experts["expert_count"]
            if len(experts) == 2 and experts["expert_count"] else 1.0)
    count, by_type = 0.0, dict[str, int]()
    for t in reader.tensors:
        if len(t.shape) >= 2 and t.name not in _LOOKED_UP:
            count += int(t.n_elements) * (used if "_exps." in t.name else 1.0)
            by_type[t.tensor_type.name] = by_type.get(t.tensor_type.name, 0) + int(t.n_bytes)
    if not count:
        raise ProfinferError(f"{model} has no weight matrices to time")
    return round(count), ggml_type_name(max(by_type, key=lambda k: by_type[k]))


def compute_peaks(llama_bench: Path, model: Path, threads: list[int]) -> list[Peak]:
    """ggml's matmul FLOP/s on `model`'s weights at each thread count (llama-bench pp512)."""
    weights, dtype = matmul_weights(model)
    cmd = [str(llama_bench), "-m", str(model), "-p", "512", "-n", "0", "-r", "3", "-o", "json",
           "-t", ",".join(map(str, threads))]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ProfinferError(f"cannot run {llama_bench}: {exc.strerror}") from None
    try:
        runs = json.loads(done.stdout) if done.returncode == 0 else None
    except json.JSONDecodeError:
        runs = None
    if not runs:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProfinferError(f"{llama_bench.name} on {model.name} failed ({last})")
    return [Peak(PeakKind.COMPUTE, int(r["n_threads"]),
                 round(float(r["avg_ts"]) * 2 * weights / 1e9, 1), dtype,
                 f"llama-bench pp512 on {model.name}: {float(r['avg_ts']):.1f} tokens/s x 2 x "
                 f"{weights} matmul weights")
            for r in runs]
