"""Where the probes go in a target: the files it maps, the offsets of the runtime's functions.

A launched command is resolved from its executable and the libraries the loader would map for
it (`ldd`); a running process from `/proc/PID/maps`, each file through the kernel's own handle on
its mapping, `/proc/PID/map_files/START-END`: the very file mapped, in a container too (its path
joined to `/proc/PID/root` could follow the container's absolute links or `..` out to the host's
files). Root reads and probes it through a link of the file's name, in a folder of its own that
lasts as long as the recorder. Libraries are found by what they define, not by name, so static
builds (everything in the executable) and shared ones (libggml-cpu.so.0, ...) both work.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from profinfer_perfetto.analysis.code import arch_of, call_sites, inner_calls
from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.ggml import GgmlInfo, read_ggml_info
from profinfer_perfetto.analysis.isa import Flow
from profinfer_perfetto.analysis.loop import LoopBarrier, function_at, loop_barriers
from profinfer_perfetto.errors import ProfinferError

OP_SYMBOL = "ggml_cpu_extra_compute_forward"
"""The per-node op entry, exported (builds from mid-2025 on)."""
LOCAL_OP_SYMBOL = "ggml_compute_forward"
"""The per-node op entry of older builds (llama.cpp 2024, llama-cpp-python 0.3.2): a local
function, found only through `.symtab`; it is also entered for no-op nodes (and returns)."""
FUSED_SYMBOL = "ggml_compute_forward_rms_norm_mul_fused"
GRAPH_SYMBOL = "ggml_graph_compute"
ALLOC_SYMBOL = "ggml_gallocr_alloc_graph"
"""Allocates a graph that was (re)built; llama.cpp does not call it for a graph it reuses."""
BARRIER_SYMBOLS = ("ggml_barrier", "GOMP_barrier")
LOOP_ENTRY = "loop_enter"
"""The program on entering the graph loop's function (probes/ggml.bpf.c)."""
LOADER_SYMBOL = "_dl_debug_state"
"""The dynamic loader's hook for debuggers, called around every change to the objects mapped."""
BLAS_GRAPH = "ggml_backend_blas_graph_compute"
"""The BLAS backend's graph loop (a file-local C++ function, found through `.symtab`)."""
BLAS_CALL = "cblas_sgemm"
"""What the BLAS backend's MUL_MAT and OUT_PROD nodes call, in any CBLAS library."""
VULKAN_GRAPH = "ggml_backend_vk_graph_compute"
"""The Vulkan backend's graph split (a file-local C++ function of libggml-vulkan)."""
VULKAN_SYMBOLS = (
    ("vk_graph", "_ZL29ggml_backend_vk_graph_computeP12ggml_backendP11ggml_cgraph"),
    ("vk_node",
     "_Z19ggml_vk_build_graphP23ggml_backend_vk_contextP11ggml_cgraphiP11ggml_tensoribbb"),
    ("vk_submit", "_Z14ggml_vk_submitRSt10shared_ptrI17vk_context_structEN2vk5FenceE"),
    ("vk_wait", "_Z22ggml_vk_wait_for_fenceP23ggml_backend_vk_context"),
    ("vk_to_device",
     "_Z33ggml_backend_vk_buffer_set_tensorP19ggml_backend_bufferP11ggml_tensorPKvmm"),
    ("vk_to_device", "_ZL32ggml_backend_vk_set_tensor_asyncP12ggml_backendP11ggml_tensorPKvmm"),
    ("vk_from_device",
     "_Z33ggml_backend_vk_buffer_get_tensorP19ggml_backend_bufferPK11ggml_tensorPvmm"),
    ("vk_from_device",
     "_ZL32ggml_backend_vk_get_tensor_asyncP12ggml_backendPK11ggml_tensorPvmm"),
    ("vk_copy_async", "_ZL32ggml_backend_vk_cpy_tensor_asyncP12ggml_backendS0_PK11ggml_tensorPS1_"),
)
"""The Vulkan backend's probed functions, each with the stem of its probes' names (`vk_graph`:
vk_graph_begin and vk_graph_end; a buffer's copy and the backend's asynchronous one share
theirs: both take the bytes fifth): .symtab's mangled C++ names of llama.cpp 0.3.36's, matched
exactly, so that the probe and what it reads agree (gcc's `.cold` twin of each is no entry)."""
VULKAN_QUERY = "vkGetQueryPoolResults"
"""What the Vulkan backend reads its GPU timestamps back with (GGML_VK_PERF_LOGGER): the
loader's exported entry, which ggml-vulkan's dispatcher (loaded through vkGetInstanceProcAddr)
calls."""
TOKEN_SYMBOLS = {"llama_decode": "decode_begin", "llama_encode": "encode_begin",
                 "llama_process": "process_begin"}


@dataclass(frozen=True)
class Probe:
    """One uprobe: BPF function `fn` runs at `offset` of `path` (or on return, if `ret`)."""

    fn: str
    path: Path
    offset: int
    where: str
    ret: bool = False


@dataclass(frozen=True)
class ProbePlan:
    probes: tuple[Probe, ...]
    ggml: GgmlInfo
    notes: tuple[str, ...]
    """What the plan could not do on this build, in a sentence each (shown in the summary)."""
    arch: str = ""
    """The architecture of the runtime's code (Arch.name)."""
    loop_barriers: tuple[LoopBarrier, ...] = ()
    """The barrier calls of the graph loop whose node is known (analysis/loop.py): each probed
    by a program of its own, LoopBarrier.fn."""
    openmp: bool = False
    """The graph loop's barrier is OpenMP's (GOMP_barrier), which it skips at 1 thread."""

    @property
    def traces_blas(self) -> bool:
        """Whether the BLAS backend's graph splits are probed."""
        return any(p.fn == "blas_graph_begin" for p in self.probes)

    @property
    def traces_vulkan(self) -> bool:
        """Whether the Vulkan backend's graph splits are probed."""
        return any(p.fn == "vk_graph_begin" for p in self.probes)

    @property
    def times_vulkan(self) -> bool:
        """Whether the Vulkan backend's GPU timestamps are read (record --gpu-timestamps)."""
        return any(p.fn == "vk_query_end" for p in self.probes)

    @property
    def sees_graph_builds(self) -> bool:
        """Whether a probe tells when graphs are (re)built, so that nodes of a reused graph need
        no re-check: llama.cpp allocates every graph it builds; another runtime might change a
        graph without, so there every node is checked every time."""
        fns = {p.fn for p in self.probes}
        return "graph_alloc" in fns and bool(fns & set(TOKEN_SYMBOLS.values()))


def objects_of_command(command: list[str], extra: list[Path]) -> list[Path]:
    """The executable of a command line and the shared objects the loader maps for it."""
    exe = shutil.which(command[0])
    if exe is None:
        raise ProfinferError(f"command not found: {command[0]}")
    return objects_of_file(Path(exe)) + extra


def objects_of_file(path: Path) -> list[Path]:
    """An executable or library and the shared objects the loader would map for it.

    `ldd` asks the system loader to list them (LD_TRACE_LOADED_OBJECTS): it maps them and exits
    before running any initializer (a test checks that a library's constructor does not run)."""
    if not path.is_file():
        raise ProfinferError(f"no such file: {path}")
    objects = [path.resolve()]
    ldd = shutil.which("ldd")
    if ldd is not None:
        out = subprocess.run([ldd, str(path)], capture_output=True, text=True,
                             check=False).stdout
        objects += [Path(m) for m in re.findall(r"=>\s+(/\S+)\s+\(", out)]
    return objects


def objects_of_process(pid: int, extra: list[Path]) -> list[Path]:
    """Files mapped executable by a running process, as links to their mappings."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except FileNotFoundError:
        raise ProfinferError(f"no process with PID {pid}") from None
    except PermissionError:
        raise ProfinferError(f"cannot read the memory map of PID {pid}: run as root") from None
    links = Path(tempfile.mkdtemp(prefix=f"profinfer-{pid}-"))
    atexit.register(shutil.rmtree, links, ignore_errors=True)
    paths: dict[str, Path] = {}
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and "x" in fields[1] and fields[5].startswith("/") \
                and fields[5] not in paths:
            paths[fields[5]] = _mapping(pid, fields[0], fields[5], links / str(len(paths)))
    return list(paths.values()) + extra


def _mapping(pid: int, span: str, mapped: str, folder: Path) -> Path:
    """A link in `folder`, named as the file `mapped`, to the file mapped at `span` (START-END,
    in hex): the kernel's handle on it for root; for another user, who may not follow those
    handles, its path in the process's root (a link there leads only where they may go)."""
    start, end = (int(a, 16) for a in span.split("-"))
    handle = (f"/proc/{pid}/map_files/{start:x}-{end:x}" if os.geteuid() == 0
              else f"/proc/{pid}/root{mapped}")
    folder.mkdir()
    link = folder / Path(mapped.removesuffix(" (deleted)")).name
    link.symlink_to(handle)
    return link


@cache
def _symbols(path: Path) -> frozenset[str]:
    """The symbols a mapped file defines (none if it is no ELF file we can read); read once."""
    try:
        return frozenset(ElfFile(path).symbols)
    except (OSError, ValueError, ProfinferError):
        return frozenset()


def runtime_in(objects: list[Path]) -> bool:
    """Whether the ggml CPU runtime's op entry is among these files."""
    return any({OP_SYMBOL, LOCAL_OP_SYMBOL} & _symbols(p) for p in objects)


def loader_in(objects: list[Path]) -> Path | None:
    """The dynamic loader among a process's files (none for a static executable)."""
    return next((p for p in objects if LOADER_SYMBOL in _symbols(p)), None)


def _defining(files: list[ElfFile], symbol: str) -> ElfFile | None:
    return next((f for f in files if symbol in f.symbols), None)


def _entry_address(f: ElfFile, symbol: str, ret: bool = False) -> int:
    """Where a probe on entering a function goes (past a landing pad: Arch.entry_probe_address),
    or, with `ret`, its uretprobe."""
    sym = f.symbols[symbol]
    if not sym.size:
        return sym.vaddr
    arch, code = arch_of(f), f.read(sym.vaddr, sym.size)
    if ret:
        return arch.return_probe_address(code, sym.vaddr)
    return arch.entry_probe_address(code, sym.vaddr)


def _site(f: ElfFile, fn: str, at: int, where: str, ret: bool = False) -> Probe:
    """A probe at address `at`, refused in one sentence where the kernel would refuse it."""
    arch = arch_of(f)
    if arch.refused(f.read(at, 16), at):
        raise ProfinferError(f"cannot probe {where} in {f.path.name}: the kernel refuses a "
                             f"uprobe on the {arch.name} instruction at {at:#x}")
    return Probe(fn, f.path, f.file_offset(at), where, ret)


def _entry(f: ElfFile, symbol: str, fn: str, ret: bool = False) -> Probe:
    """A probe on entering a function, or on its return."""
    return _site(f, fn, _entry_address(f, symbol, ret), symbol, ret)


def _op_probes(f: ElfFile, symbol: str, calls: list[int], notes: list[str]) -> list[Probe]:
    """The op probe: on entering the op function, or, where the kernel would single-step the
    instruction there (2024's ggml_compute_forward starts with its early return's load of the
    node's op, before any push), on each of its calls (found in every function that calls
    it): a direct call is emulated, and the arguments are in their registers already. A note
    says where neither is possible."""
    at = _entry_address(f, symbol)
    stepped = arch_of(f).single_stepped(f.read(at, 16), at)
    if stepped and not calls:
        notes.append(f"the op probe sits on an instruction the kernel single-steps ({symbol} "
                     f"at {at:#x}, with no direct call of it to probe instead): each op costs a "
                     "second exception, several times the cost of one trap (--floor measures it)")
    if not stepped or not calls:
        return [_site(f, "op_begin", at, symbol)]
    return [_site(f, "op_begin", a, f"call {symbol} at {a:#x}") for a in calls]


def _inner_wait_probes(f: ElfFile, op_symbol: str, notes: list[str]) -> list[Probe]:
    """Each call of ggml_barrier inside an op's own function (a matmul's threads wait there for
    each other once they have converted the input) and the instruction it returns to. A tail
    call (a jump: llamafile's tinyBLAS ends so) returns to another function: its wait ends
    with the op's work. A call whose return the kernel would refuse to probe is left out, and
    a note says so."""
    arch = arch_of(f)
    probes: list[Probe] = []
    left_out = 0
    for call in inner_calls(f, BARRIER_SYMBOLS[0], op_symbol):
        where = f"{call.flow.value} {BARRIER_SYMBOLS[0]} at {call.address:#x}"
        back = call.address + call.size
        if call.flow is Flow.CALL and arch.refused(f.read(back, 16), back):
            left_out += 1
            continue
        probes.append(_site(f, "inner_wait_begin", call.address, where))
        if call.flow is Flow.CALL:
            probes.append(_site(f, "inner_wait_end", back, f"return of {where}"))
    if left_out:
        notes.append(f"{left_out} calls of {BARRIER_SYMBOLS[0]} inside ops return to an "
                     "instruction the kernel cannot probe: their waits count as op time")
    return probes


def _blas_probes(files: list[ElfFile], ggml: GgmlInfo, notes: list[str]) -> list[Probe]:
    """The BLAS backend's graph splits, and the cblas_sgemm returns that cut them into ops."""
    found = next(((f, s) for f in files if (s := f.function_named(BLAS_GRAPH))), None)
    if found is None:
        return []
    graph_file, symbol = found
    if not ggml.runtime.cgraph_nodes:
        notes.append("the BLAS backend's graphs are not traced: this build has no "
                     "ggml_graph_node to say where a graph keeps its nodes")
        return []
    probes = [_entry(graph_file, symbol, "blas_graph_begin"),
              _entry(graph_file, symbol, "graph_end", ret=True)]
    call_file = _defining(files, BLAS_CALL)
    if call_file is None:
        notes.append(f"no {BLAS_CALL} in the target's libraries: the BLAS backend's graphs are "
                     "traced without their ops")
    else:
        probes.append(_entry(call_file, BLAS_CALL, "blas_call", ret=True))
    return probes


def _vulkan_probes(files: list[ElfFile], ggml: GgmlInfo, notes: list[str]) -> list[Probe]:
    """The Vulkan backend's graph splits, node recordings, submits, waits and copies: each
    function's entry and return, or none where one of them is not there (another version);
    and the loader's vkGetQueryPoolResults, where the target's libraries have it."""
    vk_file = next((f for f in files if f.function_named(VULKAN_GRAPH)), None)
    if vk_file is None:
        return []
    missing = [s for _, s in VULKAN_SYMBOLS if s not in vk_file.symbols]
    if missing or not ggml.runtime.cgraph_nodes:
        why = (f"{vk_file.path.name} has no {missing[0]} (another version)" if missing
               else "this build has no ggml_graph_node to say where a graph keeps its nodes")
        notes.append(f"the Vulkan backend's graphs are not traced: {why}")
        return []
    query_file = _defining(files, VULKAN_QUERY)
    queries = [] if query_file is None else [
        _entry(query_file, VULKAN_QUERY, f"vk_query_{end}", ret=end == "end")
        for end in ("begin", "end")]
    return [_entry(vk_file, symbol, f"{stem}_{end}", ret=end == "end")
            for stem, symbol in VULKAN_SYMBOLS for end in ("begin", "end")] + queries


def _op_entry(files: list[ElfFile], names: list[str]) -> tuple[str, ElfFile]:
    """The op entry the probes trace and the file that defines it: the CPU backend's exported
    one, or the older, local ggml_compute_forward beside ggml_graph_compute."""
    op_file = _defining(files, OP_SYMBOL)
    if op_file is not None:
        return OP_SYMBOL, op_file
    graph_file = _defining(files, GRAPH_SYMBOL)
    if graph_file is not None and LOCAL_OP_SYMBOL in graph_file.symbols:
        return LOCAL_OP_SYMBOL, graph_file
    stripped = "" if graph_file is None or graph_file.has_symtab else (
        f" and {graph_file.path.name} has no .symtab to find the older, local "
        f"{LOCAL_OP_SYMBOL} in (a build from source keeps it)")
    raise ProfinferError(f"{OP_SYMBOL} is not defined in {', '.join(names)}{stripped}: "
                         "is this a ggml CPU build with symbols (not stripped of them)?")


def _token_probes(files: list[ElfFile], ggml: GgmlInfo, notes: list[str]) -> list[Probe]:
    """Each token step's begin and end, at the llama entries the target has."""
    probes = []
    for symbol, fn in TOKEN_SYMBOLS.items():
        token_file = _defining(files, symbol)
        if token_file is not None and fn == "process_begin" and not ggml.runtime.batch_ext_tokens:
            notes.append("llama_process is there but llama_batch_ext's layout could not be read "
                         "(no llama_batch_ext::set_token_id): its token steps are not traced")
        elif token_file is not None:
            probes.append(_entry(token_file, symbol, fn))
            probes.append(_entry(token_file, symbol, "token_end", ret=True))
    return probes


def plan_probes(objects: list[Path], inner_waits: bool = False) -> ProbePlan:
    """Find every probed function in the target's files (the calls of ggml_barrier inside ops
    only with `inner_waits`: finding them decodes some hundred functions); refuse if the
    runtime is not there."""
    files = [ElfFile(p) for p in dict.fromkeys(objects) if p.exists()]
    names = [str(objects[0])] + [f.path.name for f in files[1:]]
    probes: list[Probe] = []
    notes: list[str] = []

    def require(symbol: str) -> ElfFile:
        found = _defining(files, symbol)
        if found is None:
            raise ProfinferError(
                f"{symbol} is not defined in {', '.join(names)}: "
                "is this a ggml CPU build with symbols (not stripped of them)?"
            )
        return found

    op_symbol, op_file = _op_entry(files, names)
    graph_file = require(GRAPH_SYMBOL)
    ggml = read_ggml_info(files)
    sites = call_sites(op_file, op_symbol, (*BARRIER_SYMBOLS, FUSED_SYMBOL, op_symbol))
    probes += _op_probes(op_file, op_symbol, sites.pop(op_symbol), notes)
    probes.append(_entry(graph_file, GRAPH_SYMBOL, "graph_begin"))
    probes.append(_entry(graph_file, GRAPH_SYMBOL, "graph_end", ret=True))
    alloc_file = _defining(files, ALLOC_SYMBOL)
    if alloc_file is not None:
        probes.append(_entry(alloc_file, ALLOC_SYMBOL, "graph_alloc"))

    loop = _loop_barriers(op_file, ggml, [a for b in BARRIER_SYMBOLS for a in sites[b]])
    for callee, addrs in sites.items():
        fn = "fused_op_begin" if callee == FUSED_SYMBOL else "barrier_enter"
        probes += [_site(op_file, loop[a].fn if a in loop else fn, a, f"call {callee} at {a:#x}")
                   for a in addrs]
    probes += _loop_entry(op_file, loop)
    if not any(sites[b] for b in BARRIER_SYMBOLS):
        notes.append(
            f"no call of ggml_barrier found in {op_file.path.name}'s graph loop: "
            "barrier wait is counted as op time"
        )
    if inner_waits:
        probes += _inner_wait_probes(op_file, op_symbol, notes)
    if not sites[FUSED_SYMBOL] and FUSED_SYMBOL in op_file.symbols:
        probes.append(_entry(op_file, FUSED_SYMBOL, "fused_op_begin"))

    probes += _token_probes(files, ggml, notes)
    probes += _blas_probes(files, ggml, notes)
    probes += _vulkan_probes(files, ggml, notes)
    if not any(p.fn in TOKEN_SYMBOLS.values() for p in probes):
        notes.append("no llama_decode in the target: no token steps, graphs only")
    return ProbePlan(tuple(probes), ggml, tuple(notes), arch_of(op_file).name,
                     tuple(loop.values()), openmp=bool(sites[BARRIER_SYMBOLS[1]]))


def _loop_entry(f: ElfFile, loop: dict[int, LoopBarrier]) -> list[Probe]:
    """The entry of the function whose barrier calls name their node: each thread enters it
    once per graph, where its first node's work begins (one trap per op; none where those
    calls are in more than one function)."""
    functions = {function_at(f, b.address) for b in loop.values() if b.index}
    if len(functions) != 1 or (function := functions.pop()) is None:
        return []
    start, end = function
    name = next((n for n, s in f.symbols.items() if s.vaddr == start and s.size), None)
    if name is not None:
        return [_entry(f, name, LOOP_ENTRY)]
    at = arch_of(f).entry_probe_address(f.read(start, end - start), start)  # stripped
    return [_site(f, LOOP_ENTRY, at, f"the graph loop's function at {start:#x}")]


def _loop_barriers(f: ElfFile, ggml: GgmlInfo, calls: list[int]) -> dict[int, LoopBarrier]:
    """The barrier calls of the graph loop whose node is known, where the build says where a
    graph keeps its nodes."""
    if not ggml.runtime.cgraph_nodes:
        return {}
    return loop_barriers(f, arch_of(f), calls, ggml.runtime.cgraph_n_nodes)
