// The sched program (record --sched): every context switch and wakeup on the CPUs the target
// may run on, for Perfetto's CPU tracks and thread states and the interference metric.
//
// A record per sched_switch (the task switched out is the current one: its tgid comes with
// it) and per sched_waking (the woken task, the CPU it will run on, the waker's CPU), in time
// order per CPU, into one ring that user space copies out in bulk. Nothing is filtered by
// task: Perfetto's compact sched format infers each switch's previous task from the switch
// before it on the same CPU, so a CPU's switches are kept whole.
//
// Defined by user space (capture/abi.py): SCHED_* kinds, MAX_CPUS, SCHED_PAGES, layout checks.

struct sched_event {
    u64 ts;
    s64 prev_state;
    u32 prev_tid;
    u32 prev_tgid;
    u32 tid;
    s32 prio;
    u16 cpu;
    u16 target_cpu;
    u32 kind;
    char comm[16];
};

BPF_ARRAY(cpus, u8, MAX_CPUS);  // 1 for each CPU the target may run on (set by user space)
BPF_ARRAY(lost, u64, 1);
BPF_RINGBUF_OUTPUT(sched, SCHED_PAGES);

static __always_inline int watched(u32 cpu) {
    u8 *on = cpus.lookup(&cpu);
    return on && *on;
}

static __always_inline struct sched_event *reserve(u32 kind, u32 cpu) {
    struct sched_event *e = sched.ringbuf_reserve(sizeof(struct sched_event));
    if (!e) {
        u32 zero = 0;
        u64 *n = lost.lookup(&zero);
        if (n)
            __sync_fetch_and_add(n, 1);
        return 0;
    }
    u64 pid_tgid = bpf_get_current_pid_tgid();
    e->ts = bpf_ktime_get_boot_ns();
    e->prev_tid = (u32)pid_tgid;
    e->prev_tgid = pid_tgid >> 32;
    e->cpu = cpu;
    e->kind = kind;
    return e;
}

TRACEPOINT_PROBE(sched, sched_switch) {
    u32 cpu = bpf_get_smp_processor_id();
    if (!watched(cpu))
        return 0;
    struct sched_event *e = reserve(SCHED_SWITCH, cpu);
    if (!e)
        return 0;
    e->prev_state = args->prev_state;
    e->tid = args->next_pid;
    e->prio = args->next_prio;
    e->target_cpu = cpu;
    __builtin_memcpy(e->comm, args->next_comm, sizeof(e->comm));
    sched.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_waking) {
    u32 cpu = bpf_get_smp_processor_id();
    u32 target = args->target_cpu;
    if (!watched(cpu) && !watched(target))
        return 0;
    struct sched_event *e = reserve(SCHED_WAKING, cpu);
    if (!e)
        return 0;
    e->prev_state = 0;
    e->tid = args->pid;
    e->prio = args->prio;
    e->target_cpu = target;
    __builtin_memcpy(e->comm, args->comm, sizeof(e->comm));
    sched.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
    return 0;
}
