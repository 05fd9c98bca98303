"""Print the path of the trace_processor_shell that queries would use (empty if none).

Without --trace-processor or $PROFINFER_TP_BIN that is the perfetto API's own pinned binary,
downloaded on first use and cached (~/.local/share/perfetto): setup.sh calls this once so that a
machine with a network has it before the tests, which then run every metric on both engines.
"""

from __future__ import annotations

from profinfer_perfetto.query.engines import find_trace_processor

if __name__ == "__main__":
    print(find_trace_processor()[0] or "")
