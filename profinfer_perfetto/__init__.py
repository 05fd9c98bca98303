"""profinfer-perfetto: eBPF operator-level profiling of llama.cpp into Perfetto traces."""

__version__ = "0.1.0"
