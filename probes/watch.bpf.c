// The watch program: follows a launched command's processes until one maps the ggml runtime.
//
// Every process forked by a process of the tree joins it. A process of the tree is stopped
// (SIGSTOP, from the probe itself, so it is stopped before it runs another instruction of its
// own) when it executes a new program and whenever its dynamic loader reports a change to its
// objects (_dl_debug_state: once before a dlopen maps, once after, and once after the startup
// libraries are mapped, before any of their initializers run). User space then reads the
// process's memory map, attaches the op probes if the runtime is there, and resumes it: the
// probes are in place before the runtime's first instruction, however it was loaded.
//
// Defined by user space (capture/abi.py): STOP_* reasons, MISSED_* indices, struct layout
// checks.

#include <uapi/linux/ptrace.h>

#define SIGSTOP 19

struct stop {
    u32 tgid;
    u32 reason;
};

BPF_HASH(tree, u32, u8, 65536);  // process ids of the tree (threads' ids may join: harmless)
BPF_RINGBUF_OUTPUT(stops, 1);
// Stops not made: [MISSED_SIGNAL] the kernel refused the signal, [MISSED_RING] the ring was
// full, [MISSED_ERROR] the signal's last error (user space says so in the run's notes).
BPF_ARRAY(missed, s64, MISSED_ERROR + 1);

static __always_inline void miss(u32 why, s64 error) {
    s64 *count = missed.lookup(&why);
    if (count)
        __sync_fetch_and_add(count, 1);
    u32 at = MISSED_ERROR;
    s64 *last = missed.lookup(&at);
    if (last && error)
        *last = error;
}

TRACEPOINT_PROBE(sched, sched_process_fork) {
    u32 parent = bpf_get_current_pid_tgid() >> 32;
    if (!tree.lookup(&parent))
        return 0;
    u32 child = args->child_pid;
    u8 one = 1;
    tree.update(&child, &one);
    return 0;
}

static __always_inline int stop_here(u32 reason) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (!tree.lookup(&tgid))
        return 0;
    // The record is reserved first (a stop only where user space will hear of it and resume
    // it), the signal sent, and only then the record published: user space's SIGCONT always
    // comes after this SIGSTOP. Published before the signal, a resume could come first and
    // leave the process stopped, or, were the signal refused, user space would resume the
    // process at its next stop with the SIGCONT meant for this one.
    struct stop *s = stops.ringbuf_reserve(sizeof(struct stop));
    if (!s) {
        miss(MISSED_RING, 0);
        return 0;
    }
    long error = bpf_send_signal(SIGSTOP);
    if (error != 0) {
        stops.ringbuf_discard(s, 0);
        miss(MISSED_SIGNAL, error);
        return 0;
    }
    s->tgid = tgid;
    s->reason = reason;
    stops.ringbuf_submit(s, BPF_RB_FORCE_WAKEUP);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exec) {
    return stop_here(STOP_EXEC);
}

int loader_state(struct pt_regs *ctx) {
    return stop_here(STOP_LOADER);
}
