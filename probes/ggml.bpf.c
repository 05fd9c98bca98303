// profinfer-perfetto: uprobes on an unmodified llama.cpp / ggml CPU build.
//
// Two BPF ring buffers cross to user space, read in bulk without a wakeup per event:
//   events: one 40-byte record (and 8 bytes per perf counter read) per token, graph, op and
//           barrier boundary;
//   nodes:  one descriptor per graph node, sent when a graph is computed for the first time
//           after it was built (graph_begin), and again only for nodes whose bytes changed.
//           The op probes do no more than the barrier probe: they never read a node.
// Every record of a ring has the same size, so the reader parses a whole ring as one
// numpy array (profinfer_perfetto/capture/ringbuf.py).
//
// The probe ABI is defined in profinfer_perfetto/capture/events.py, not here: capture/abi.py
// defines before this text the event kinds (EV_*), backends (BACKEND_*), token entries
// (TOKEN_*), ring indices (RING_*, N_RINGS), N_SRC (sources described per node), MAX_COUNTERS,
// COUNTER_UNREAD (a counter slot whose read failed), HIST_BUCKETS, the
// llama_batch offsets (BATCH_N_TOKENS, BATCH_POS, BATCH_SEQ_ID) and BATCH_SCAN, and
// checks after it, at compile time, that struct event, src, node and op_stats have the layout
// of their numpy dtypes.
//
// Defined by profinfer_perfetto/capture/program.py before this text:
//   T_TYPE T_NE T_OP T_OP_PARAMS T_FLAGS T_SRC T_VIEW_SRC T_DATA T_NAME T_SIZE
//                    offsets in ggml_tensor (derived from the build: capture/ggml.py)
//   T_N_SRC          sources a ggml_tensor has (GGML_MAX_SRC)
//   CGRAPH_N_NODES CPLAN_N_THREADS                           offsets in ggml_cgraph / ggml_cplan
//   BLAS             1: the BLAS backend's graph splits are probed (blas_graph_begin, blas_call)
//   VULKAN           1: the Vulkan backend's graph splits, node recordings, submits, waits
//                    for the device and host-device copies are probed (vk_*); HOST_* name
//                    those host calls (capture/events.py HostCall)
//   CGRAPH_NODES     offset of the nodes array in ggml_cgraph
//   OP_MUL_MAT OP_OUT_PROD  the op ids the BLAS backend runs (with cblas_sgemm)
//   MAX_BLAS_NODES MAX_BLAS_OPS  a BLAS graph split's nodes looked at, and the MUL_MAT and
//                    OUT_PROD nodes among them described (a power of two): a bigger split is
//                    traced as a graph without ops
//   BATCH_EXT_TOKENS BATCH_EXT_TOKEN_SIZE                    llama_batch_ext's token vector
//   BATCH_EXT_POS BATCH_EXT_SEQ_IDS    a token's positions and sequence id set (0: unknown)
//   OP_MUL_MAT_ID OP_ADD_ID  their op ids, -1 for none; a build with MUL_MAT_ID has its
//                    Mixture-of-Experts routing read (struct route, ring routes)
//   T_NB             offset of nb in ggml_tensor
//   USET_FIRST USET_NODE_VALUE         libstdc++'s unordered_set: first node, a node's value
//   N_COUNTERS       perf counters read into every event (0 to MAX_COUNTERS)
//   EVENT_PAGES NODE_PAGES  ring sizes in pages (powers of two)
//   MAX_CPUS         size of the perf event arrays
//   MAX_OPS MAX_THREADS MAX_TENSORS  sizes of the tables by op id, thread and tensor
//   GATED            1: ops and graphs are traced only in chosen token steps, from FIRST_STEP
//                    (inclusive) to LAST_STEP (exclusive, 0 = no end), every SAMPLE_EVERY-th
//   DETACH           1: the op probes come and go with the chosen steps (a `steer` record
//                    wakes the recorder when they should)
//   OP_FILTER        1: only ops whose op id is set in `op_traced`, or whose tensor name starts
//                    with NAME_PREFIX (NAME_PREFIX_LEN bytes, 0 = no name pattern)
//   REFRESH_EVERY    a graph's nodes are all described again at every REFRESH_EVERY-th
//                    computation of it (their sources' shapes are not in their own bytes)
//   GRAPH_BUILDS     1 (llama.cpp): `graph_alloc` counts graph (re)builds; a graph described
//                    since the last build is not read again until its next refresh (a reused
//                    graph keeps its nodes as they were); 0: every computation of a graph reads
//                    its nodes and sends those whose bytes changed
//   MAX_GRAPHS       graphs (by node array and size) whose last description the probes
//                    remember
//   OP_NONE OP_RESHAPE OP_VIEW OP_PERMUTE OP_TRANSPOSE  the empty ops the graph loop skips
//   AGGREGATE        1: no op events; each thread's share of a node is summed into `op_stats`
//                    (count, work, barrier wait, max, log2 histogram of work) keyed by tensor,
//                    and a node is described once

#include <uapi/linux/ptrace.h>

// Every read of the target's memory goes through this one call site: BCC 0.26 reads and hashes
// /proc/kallsyms anew at each call of bpf_probe_read_user it compiles (its check for kernels
// older than 5.5), 0.1 s a site: with its 37 sites the program took 4.0 s to compile, with
// one 1.1 s.
static __always_inline long read_user(void *dst, u32 size, const void *src) {
    return bpf_probe_read_user(dst, size, src);
}

struct event {
    u64 ts;
    u64 arg0;      // op: tensor; graph: cgraph; token: n_tokens (begin) or status (end)
    u64 arg1;      // fused op: second tensor; graph: n_nodes | n_threads << 32
    u32 pid;
    u32 tid;
    u16 cpu;
    u8 kind;
    u8 ith;        // op begin: the thread's index in the graph's thread pool
    u32 aux;       // op begin: pool size; token begin: TOKEN_DECODE or TOKEN_ENCODE; graph: backend id
    u64 counter[N_COUNTERS];  // scaled totals on this CPU (none without --counter)
};

struct src {
    u64 ptr;
    u64 view_src;
    s64 ne[4];
    u32 type;
    u32 op;
};

struct node {
    u64 ts;        // of the event whose probe described it: its graph's begin (--aggregate: its first op begin)
    u64 ptr;
    u64 view_src;
    s64 ne[4];
    u32 pid;
    u32 tid;
    u32 op;
    s32 op_param0; // the sub-op of UNARY and GLU
    u32 type;
    u32 flags;
    struct src src[N_SRC];
    char name[64];
};

struct op_stats {      // --aggregate: per tensor, over threads and steps
    u64 count;
    u64 work_ns;
    u64 wait_ns;
    u64 max_work_ns;
    u64 hist[HIST_BUCKETS];  // work: bucket b counts shares of 2^(b-1) to 2^b ns
};

struct tensor_bytes {
    u8 b[T_SIZE];
};

BPF_RINGBUF_OUTPUT(events, EVENT_PAGES);
BPF_RINGBUF_OUTPUT(nodes, NODE_PAGES);
BPF_PERCPU_ARRAY(lost, u64, N_RINGS);
BPF_PERCPU_ARRAY(scratch, struct tensor_bytes, 2);  // [0] the node, [1] one of its sources
struct seen {
    u64 signature; // of the tensor's bytes when it was last described
    u64 routes;    // its op routes tokens to experts (MUL_MAT_ID, ADD_ID)
};
BPF_HASH(described_as, u64, struct seen, MAX_TENSORS);
BPF_ARRAY(graph_builds, u64, 1);
// 1 once a node that routes tokens to experts was described: only then do the op probes look
// a node up (for its routing), so that a dense model's op path reads no map.
BPF_ARRAY(routing_seen, u64, 1);

// ggml_gallocr_alloc_graph: a graph was (re)built; its nodes may have changed.
int graph_alloc(struct pt_regs *ctx) {
    int zero = 0;
    u64 *builds = graph_builds.lookup(&zero);
    if (builds)
        __sync_fetch_and_add(builds, 1);
    return 0;
}
#if GATED
struct gate {
    u64 step;      // token steps begun so far
    u64 tracing;   // 1 while the current step is traced
};
BPF_ARRAY(gate, struct gate, 1);
// Set by the recorder while the op probes are attached. Its own map: the recorder writes it
// whole without racing the step counter that the probes advance in `gate`.
BPF_ARRAY(armed, u64, 1);

// Whether token step `step` (0-based) is one of the chosen ones.
static __always_inline int chosen(u64 step) {
    return step >= FIRST_STEP && (LAST_STEP == 0 || step < LAST_STEP)
           && (step - FIRST_STEP) % SAMPLE_EVERY == 0;
}
#endif
#if DETACH
// With --detach the recorder attaches the op probes only while a chosen step runs or is next.
// It sleeps until a token begin writes here (with a wakeup) that they should come or go.
BPF_RINGBUF_OUTPUT(steer, 1);
#endif
#if AGGREGATE
struct op_share {      // one thread's current op
    u64 node;          // its tensor (the first of a fused pair)
    u64 begin;
    u64 barrier;       // the last barrier the thread entered, 0 for none yet
};
BPF_HASH(current_op, u32, struct op_share, MAX_THREADS);
BPF_HASH(op_stats, u64, struct op_stats, MAX_TENSORS);
BPF_PERCPU_ARRAY(no_stats, struct op_stats, 1);
BPF_HASH(described, u64, u8, MAX_TENSORS);
BPF_ARRAY(last_graph_end, u64, 1);

// Add a thread's finished share to its node's statistics; its wait ends at `now`, or at the
// end of the graph when that came first (worker threads see no graph end of their own).
static __always_inline void close_share(u32 tid, u64 now) {
    struct op_share *cur = current_op.lookup(&tid);
    if (!cur || !cur->node)
        return;
    u64 work_end = cur->barrier ? cur->barrier : now;
    u64 end = now;
    int zero = 0;
    u64 *graph_end = last_graph_end.lookup(&zero);
    if (graph_end && *graph_end > work_end && *graph_end < end)
        end = *graph_end;
    u64 work = work_end - cur->begin;
    struct op_stats *fresh = no_stats.lookup(&zero);  // zeros, kept off the small BPF stack
    if (!fresh)
        return;
    struct op_stats *s = op_stats.lookup_or_try_init(&cur->node, fresh);
    if (s) {
        __sync_fetch_and_add(&s->count, 1);
        __sync_fetch_and_add(&s->work_ns, work);
        __sync_fetch_and_add(&s->wait_ns, end - work_end);
        if (work > s->max_work_ns)
            s->max_work_ns = work;
        u32 bucket = bpf_log2l(work);
        if (bucket >= HIST_BUCKETS)
            bucket = HIST_BUCKETS - 1;
        __sync_fetch_and_add(&s->hist[bucket], 1);
    }
    cur->node = 0;
}
#endif
#if OP_FILTER
BPF_ARRAY(op_traced, u8, MAX_OPS);
BPF_HASH(op_skipped, u32, u8, MAX_THREADS);  // per thread: its current op is left out
#endif
// The perf counters (--counter), one perf array each, read on the current CPU.
#if N_COUNTERS > 0
BPF_PERF_ARRAY(counter0, MAX_CPUS);
#endif
#if N_COUNTERS > 1
BPF_PERF_ARRAY(counter1, MAX_CPUS);
#endif
#if N_COUNTERS > 2
BPF_PERF_ARRAY(counter2, MAX_CPUS);
#endif
#if N_COUNTERS > 3
BPF_PERF_ARRAY(counter3, MAX_CPUS);
#endif
#if N_COUNTERS > 4
BPF_PERF_ARRAY(counter4, MAX_CPUS);
#endif
#if N_COUNTERS > 5
BPF_PERF_ARRAY(counter5, MAX_CPUS);
#endif
#if N_COUNTERS > 6
BPF_PERF_ARRAY(counter6, MAX_CPUS);
#endif
#if N_COUNTERS > 7
BPF_PERF_ARRAY(counter7, MAX_CPUS);
#endif

// A counter's total as if it had counted all the time it was enabled: the kernel multiplexes
// more counters than the PMU has, each counting part of the time (`perf stat` scales alike).
// enabled/running in 1/65536ths, so that nothing overflows for hours of counting.
static __always_inline u64 scaled(int err, struct bpf_perf_event_value *v) {
    if (err)
        return COUNTER_UNREAD;
    if (v->running == 0 || v->running >= v->enabled)
        return v->counter;
    u64 ratio = (v->enabled << 16) / v->running;
    return (v->counter >> 16) * ratio + (((v->counter & 0xFFFF) * ratio) >> 16);
}

// Each counter's scaled total into the event (BCC takes a map's methods only written out).
static __always_inline void read_counters(struct event *e) {
#if N_COUNTERS > 0
    struct bpf_perf_event_value v = {};
    int err = 0;
#endif
#if N_COUNTERS > 0
    err = counter0.perf_counter_value(CUR_CPU_IDENTIFIER, &v, sizeof(v));
    e->counter[0] = scaled(err, &v);
#endif
#if N_COUNTERS > 1
    err = counter1.perf_counter_value(CUR_CPU_IDENTIFIER, &v, sizeof(v));
    e->counter[1] = scaled(err, &v);
#endif
#if N_COUNTERS > 2
    err = counter2.perf_counter_value(CUR_CPU_IDENTIFIER, &v, sizeof(v));
    e->counter[2] = scaled(err, &v);
#endif
#if N_COUNTERS > 3
    err = counter3.perf_counter_value(CUR_CPU_IDENTIFIER, &v, sizeof(v));
    e->counter[3] = scaled(err, &v);
#endif
#if N_COUNTERS > 4
    err = counter4.perf_counter_value(CUR_CPU_IDENTIFIER, &v, sizeof(v));
    e->counter[4] = scaled(err, &v);
#endif
#if N_COUNTERS > 5
    err = counter5.perf_counter_value(CUR_CPU_IDENTIFIER, &v, sizeof(v));
    e->counter[5] = scaled(err, &v);
#endif
#if N_COUNTERS > 6
    err = counter6.perf_counter_value(CUR_CPU_IDENTIFIER, &v, sizeof(v));
    e->counter[6] = scaled(err, &v);
#endif
#if N_COUNTERS > 7
    err = counter7.perf_counter_value(CUR_CPU_IDENTIFIER, &v, sizeof(v));
    e->counter[7] = scaled(err, &v);
#endif
}

static __always_inline void count_lost(int ring) {
    u64 *n = lost.lookup(&ring);
    if (n)
        *n += 1;
}

static __always_inline struct event *begin_event(u8 kind) {
    struct event *e = events.ringbuf_reserve(sizeof(struct event));
    if (!e) {
        count_lost(RING_EVENTS);
        return 0;
    }
    u64 pid_tgid = bpf_get_current_pid_tgid();
    e->ts = bpf_ktime_get_boot_ns();
    e->pid = pid_tgid >> 32;
    e->tid = (u32)pid_tgid;
    e->cpu = bpf_get_smp_processor_id();
    e->kind = kind;
    e->ith = 0;
    e->aux = 0;
    e->arg0 = 0;
    e->arg1 = 0;
    read_counters(e);
    return e;
}

static __always_inline void submit(struct event *e) {
    events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

// Whether ops and graphs are traced now (outside the chosen token steps they are not).
static __always_inline int tracing(void) {
#if GATED
    int zero = 0;
    struct gate *g = gate.lookup(&zero);
    return g && g->tracing;
#else
    return 1;
#endif
}

#if OP_FILTER
// Whether the op filter keeps a node: its op id is chosen, or its name has the prefix.
static __always_inline int op_kept(const void *tensor) {
    u32 op = 0;
    read_user(&op, 4, (const u8 *)tensor + T_OP);
    u8 *chosen = op_traced.lookup(&op);
    if (chosen && *chosen)
        return 1;
#if NAME_PREFIX_LEN > 0
    char name[NAME_PREFIX_LEN] = {};
    const char prefix[] = NAME_PREFIX;
    read_user(name, NAME_PREFIX_LEN, (const u8 *)tensor + T_NAME);
#pragma unroll
    for (int i = 0; i < NAME_PREFIX_LEN; i++)
        if (name[i] != prefix[i])
            return 0;
    return 1;
#else
    return 0;
#endif
}
#endif

// FNV-1a over the tensor's bytes up to its data pointer, and its name.
static __always_inline u64 signature(const u8 *b) {
    u64 h = 14695981039346656037ULL;
    const u64 *words = (const u64 *)b;
#pragma unroll
    for (int i = 0; i < T_DATA / 8; i++)
        h = (h ^ words[i]) * 1099511628211ULL;
#pragma unroll
    for (int i = 0; i < 8; i++)
        h = (h ^ words[T_NAME / 8 + i]) * 1099511628211ULL;
    return h;
}

// Whether an op routes tokens to experts, from its tensor's bytes.
static __always_inline u64 routes_of(const u8 *bytes) {
    u32 op = 0;
    __builtin_memcpy(&op, bytes + T_OP, 4);
    return op == (u32)OP_MUL_MAT_ID || op == (u32)OP_ADD_ID;
}

#define ROUTES 1  // describe(): the node's op routes tokens to experts
#define LOST 2    // describe(): its descriptor was lost (the nodes ring was full)

// Copy one tensor's descriptor into the nodes ring (counted as lost when it is full), unless
// the last one sent for it still holds and `force` is 0; returns ROUTES and LOST flags.
static __always_inline u64 describe(u64 ts, const void *tensor, u64 force) {
    int zero = 0;
    u64 key = (u64)tensor;
    struct tensor_bytes *t = scratch.lookup(&zero);
    if (!t)
        return 0;
    if (read_user(t->b, T_SIZE, tensor) != 0) {
        __builtin_memset(t->b, 0, T_SIZE);
    }
    u64 sig = signature(t->b);
    u64 routes = routes_of(t->b);
    struct seen *seen = described_as.lookup(&key);
    if (seen && seen->signature == sig && !force)
        return routes;
    struct seen fresh = {.signature = sig, .routes = routes};
    described_as.update(&key, &fresh);
    if (routes) {
        u64 one = 1;
        routing_seen.update(&zero, &one);
    }
    struct node *n = nodes.ringbuf_reserve(sizeof(struct node));
    if (!n) {
        count_lost(RING_NODES);
        described_as.delete(&key);
        return routes | LOST;
    }
    u64 pid_tgid = bpf_get_current_pid_tgid();
    n->ts = ts;
    n->ptr = (u64)tensor;
    n->pid = pid_tgid >> 32;
    n->tid = (u32)pid_tgid;
    __builtin_memcpy(&n->type, t->b + T_TYPE, 4);
    __builtin_memcpy(n->ne, t->b + T_NE, 32);
    __builtin_memcpy(&n->op, t->b + T_OP, 4);
    __builtin_memcpy(&n->op_param0, t->b + T_OP_PARAMS, 4);
    __builtin_memcpy(&n->flags, t->b + T_FLAGS, 4);
    __builtin_memcpy(&n->view_src, t->b + T_VIEW_SRC, 8);
    __builtin_memcpy(n->name, t->b + T_NAME, 64);
    int one = 1;
    struct tensor_bytes *sb = scratch.lookup(&one);
    if (!sb) {
        nodes.ringbuf_discard(n, BPF_RB_NO_WAKEUP);
        return routes | LOST;
    }
#pragma unroll
    for (int i = 0; i < N_SRC; i++) {
        struct src *s = &n->src[i];
        s->ptr = 0;
        if (i < T_N_SRC)  // a ggml with fewer sources than we describe
            __builtin_memcpy(&s->ptr, t->b + T_SRC + i * 8, 8);
        s->view_src = 0;
        s->type = 0;
        s->op = 0;
        __builtin_memset(s->ne, 0, 32);
        if (!s->ptr)
            continue;
        if (read_user(sb->b, T_VIEW_SRC + 8, (void *)s->ptr) != 0)
            continue;
        __builtin_memcpy(&s->type, sb->b + T_TYPE, 4);
        __builtin_memcpy(s->ne, sb->b + T_NE, 32);
        __builtin_memcpy(&s->op, sb->b + T_OP, 4);
        __builtin_memcpy(&s->view_src, sb->b + T_VIEW_SRC, 8);
    }
    nodes.ringbuf_submit(n, BPF_RB_NO_WAKEUP);
    return routes;
}

struct route {
    u64 ts;          // the ts of the op-begin event of the node's calling thread
    u64 node;        // the op's tensor
    u32 first_token; // the record's first token (row)
    u32 n_tokens;    // tokens (rows) of the ids tensor
    u32 n_used;      // experts per token (columns)
    u32 pad;
    s32 ids[ROUTE_TOKENS][ROUTE_EXPERTS];  // -1 past the last token or expert
};
#if OP_MUL_MAT_ID >= 0
// The experts a Mixture-of-Experts op routes each token to: the I32 ids tensor, src[2] of
// MUL_MAT_ID and ADD_ID, n_used ids per token in rows nb[1] apart, computed by the time the op
// starts. Read in records of ROUTE_TOKENS tokens, up to ROUTE_CHUNKS records (the rest, and
// experts past ROUTE_EXPERTS, are cut; a record says how many there were).
// A layer's expert ops (gate, up, down) share one ids tensor: it is read once per graph, for
// the first of them (user space gives the others its routing).
BPF_RINGBUF_OUTPUT(routes, ROUTE_PAGES);
BPF_HASH(routed, u32, u64, MAX_THREADS);  // calling thread -> ids tensor last read in its graph

static __always_inline void route(u64 ts, const u8 *tensor) {
    u64 ids = 0;
    read_user(&ids, 8, tensor + T_SRC + 2 * 8);
    if (!ids)
        return;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 *last = routed.lookup(&tid);
    if (last && *last == ids)
        return;
    routed.update(&tid, &ids);
    s64 ne[2] = {0, 0};
    u64 nb1 = 0, data = 0;
    read_user(ne, sizeof(ne), (void *)(ids + T_NE));
    read_user(&nb1, 8, (void *)(ids + T_NB + 8));
    read_user(&data, 8, (void *)(ids + T_DATA));
    if (!data || ne[0] <= 0 || ne[1] <= 0)
        return;
    u32 row = ne[0] > ROUTE_EXPERTS ? ROUTE_EXPERTS * 4 : (u32)ne[0] * 4;
#pragma nounroll
    for (int c = 0; c < ROUTE_CHUNKS; c++) {
        s64 first = (s64)c * ROUTE_TOKENS;
        if (first >= ne[1])
            break;
        struct route *r = routes.ringbuf_reserve(sizeof(struct route));
        if (!r) {
            count_lost(RING_ROUTES);
            return;
        }
        r->ts = ts;
        r->node = (u64)tensor;
        r->first_token = first;
        r->n_tokens = ne[1];
        r->n_used = ne[0];
        r->pad = 0;
#pragma unroll
        for (int t = 0; t < ROUTE_TOKENS; t++) {
            __builtin_memset(r->ids[t], 0xff, sizeof(r->ids[t]));
            // row is 4..ROUTE_EXPERTS * 4 bytes: the mask shows the verifier so
            if (first + t < ne[1])
                read_user(r->ids[t], ((row - 4) & (ROUTE_EXPERTS * 4 - 4)) + 4,
                          (void *)(data + (first + t) * nb1));
        }
        routes.ringbuf_submit(r, BPF_RB_NO_WAKEUP);
    }
}
static __always_inline void new_graph(void) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 none = 0;
    routed.update(&tid, &none);
}

// Whether a node that routes tokens to experts was described yet (an array's element: its
// lookup costs next to nothing, where a hash lookup is one of a barrier program's costs).
static __always_inline int routes_seen(void) {
    int zero = 0;
    u64 *routing = routing_seen.lookup(&zero);
    return routing && *routing;
}

// A node's routing, if its op routes tokens to experts (described so) and the model has any.
static __always_inline void route_node(u64 ts, const void *node) {
    if (!routes_seen())
        return;
    u64 key = (u64)node;
    struct seen *seen = described_as.lookup(&key);
    if (seen && seen->routes)
        route(ts, node);
}
#else
static __always_inline int routes_seen(void) { return 0; }
static __always_inline void route_node(u64 ts, const void *node) {}
static __always_inline void new_graph(void) {}
#endif

// One thread starts its share of a node (or of a fused node pair: `second` non-null).
static __always_inline int begin_op(const void *params, const void *first, const void *second) {
    if (FLOOR || !tracing())  // --floor: the trap alone
        return 0;
#if OP_FILTER
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u8 skipped = !(op_kept(first) || (second && op_kept(second)));
    op_skipped.update(&tid, &skipped);
    if (skipped) {
        struct event *skip = begin_event(EV_OP_SKIP);
        if (skip)
            submit(skip);
        return 0;
    }
#endif
#if AGGREGATE
    u32 me = (u32)bpf_get_current_pid_tgid();
    u64 now = bpf_ktime_get_boot_ns();
    close_share(me, now);
    struct op_share share = {.node = (u64)first, .begin = now, .barrier = 0};
    current_op.update(&me, &share);
    u8 one = 1;
    u64 key = (u64)first;
    if (described.lookup(&key))
        return 0;
    described.update(&key, &one);
    describe(now, first, 0);
    if (second)
        describe(now, second, 0);
    return 0;
#endif
    struct event *e = begin_event(EV_OP_BEGIN);
    if (!e)
        return 0;
    int ith_nth[2] = {0, 0};
    read_user(ith_nth, sizeof(ith_nth), params);
    e->arg0 = (u64)first;
    e->arg1 = (u64)second;
    e->ith = ith_nth[0];
    e->aux = ith_nth[1];
    u64 ts = e->ts;
    submit(e);
    // A node's descriptor was sent at its graph's begin; its routing (its ids are computed by
    // now, not then) is read here, once, by the thread with ith == 0.
    if (ith_nth[0] == 0)
        route_node(ts, first);
    return 0;
}

// ggml_cpu_extra_compute_forward(params, tensor): entered by every thread for every node.
int op_begin(struct pt_regs *ctx) {
    return begin_op((const void *)PT_REGS_PARM1(ctx), (const void *)PT_REGS_PARM2(ctx), 0);
}

// The call of ggml_compute_forward_rms_norm_mul_fused(params, rms_node, mul_node):
// a fused node pair that bypasses ggml_cpu_extra_compute_forward.
int fused_op_begin(struct pt_regs *ctx) {
    return begin_op((const void *)PT_REGS_PARM1(ctx), (const void *)PT_REGS_PARM2(ctx),
                    (const void *)PT_REGS_PARM3(ctx));
}

// Whether a thread's barrier is sent: not with --floor, outside the chosen steps, or after an
// op the --ops filter left out.
static __always_inline int barrier_sent(void) {
    if (FLOOR || !tracing())
        return 0;
#if OP_FILTER
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u8 *skipped = op_skipped.lookup(&tid);
    if (skipped && *skipped)
        return 0;
#endif
    return 1;
}

// A thread reaches a barrier (`kind`).
static __always_inline int at_barrier(u8 kind) {
    if (!barrier_sent())
        return 0;
    struct event *e = begin_event(kind);
    if (e)
        submit(e);
    return 0;
}

// A call of ggml_barrier in the graph loop function. Ops inlined there have barriers of their
// own, so user space takes the last barrier before a thread's next op as the end of its share.
#if AGGREGATE
// --aggregate: the thread's current share's work ends at a barrier.
static __always_inline int share_at_barrier(void) {
    if (FLOOR || !tracing())
        return 0;
    u32 me = (u32)bpf_get_current_pid_tgid();
    struct op_share *cur = current_op.lookup(&me);
    if (cur)
        cur->barrier = bpf_ktime_get_boot_ns();
    return 0;
}
#endif

int barrier_enter(struct pt_regs *ctx) {
#if AGGREGATE
    return share_at_barrier();
#endif
    return at_barrier(EV_BARRIER);
}

// The graph loop's function entered (one trap per op): the thread's share of a graph begins.
int loop_enter(struct pt_regs *ctx) {
    return at_barrier(EV_LOOP_ENTER);
}

// A call of ggml_barrier inside an op's own function, and the instruction it returns to: the
// thread's wait for the others within the op (not attached with --aggregate, which counts it
// as the op's work).
int inner_wait_begin(struct pt_regs *ctx) {
    return at_barrier(EV_INNER_WAIT_BEGIN);
}

int inner_wait_end(struct pt_regs *ctx) {
    return at_barrier(EV_INNER_WAIT_END);
}

struct graph_call {
    u64 cgraph;  // the graph of the process's latest graph_begin
    u32 caller;  // the thread that called it
};
BPF_HASH(graph_of, u32, struct graph_call, MAX_THREADS);  // by process

// ggml_op_is_empty: the ops the graph loop skips.
static __always_inline int empty_op(u32 op) {
    return op == OP_NONE || op == OP_RESHAPE || op == OP_VIEW || op == OP_PERMUTE
           || op == OP_TRANSPOSE;
}

// The node a thread has just finished at a barrier of the graph loop: cgraph->nodes[index], or
// with `last` (the barrier after the loop) the graph's last node unless the loop skips it;
// 0 where unknown. `cgraph` 0: the graph its process computes (graph_begin's).
static __always_inline u64 finished_node(const u8 *cgraph, s64 index, u64 last) {
    if (!cgraph) {
        u32 tgid = bpf_get_current_pid_tgid() >> 32;
        struct graph_call *latest = graph_of.lookup(&tgid);
        cgraph = latest ? (const u8 *)latest->cgraph : 0;
    }
    if (!cgraph || !CGRAPH_NODES)
        return 0;
    if (last) {
        s32 n_nodes = 0;
        read_user(&n_nodes, 4, cgraph + CGRAPH_N_NODES);
        index = n_nodes - 1;
    }
    u64 nodes = 0, node = 0;
    read_user(&nodes, 8, cgraph + CGRAPH_NODES);
    if (index < 0 || !nodes)
        return 0;
    read_user(&node, 8, (const void *)(nodes + (u64)index * 8));
    u32 op = 0;
    if (last && node && read_user(&op, 4, (const u8 *)node + T_OP) == 0
            && empty_op(op))
        return 0;
    return node;
}

// A call of ggml_barrier in the graph loop whose node is known (analysis/loop.py): called by
// its own program (capture/program.py writes one per call, with the call's registers), with
// the loop's index (node just finished: nodes[index]) and the graph (0: the process's latest),
// or `last` for the barrier after the loop. arg0: the node (0: unknown), arg1: `last`.
static __always_inline int at_barrier_node(s64 index, const u8 *cgraph, u64 last) {
#if AGGREGATE
    return share_at_barrier();
#endif
    if (!barrier_sent())
        return 0;
    struct event *e = begin_event(EV_BARRIER);
    if (!e)
        return 0;
    u64 node = finished_node(cgraph, index, last);
    e->arg0 = node;
    e->arg1 = last;
    u64 ts = e->ts;
    submit(e);
    // A node's routing, read once, by the thread that computes the graph (ith 0), as the op
    // begin does in the exact mode: its ids are still there, as no later node has run yet.
    // Looked up only where a model routes: the hash lookup took 15 of the 210 ns a run took
    // (kernel-timed, Gemma-3-270M, 2026-12-06).
    if (!node || !routes_seen())
        return 0;
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    struct graph_call *call = graph_of.lookup(&tgid);
    if (call && call->caller == (u32)pid_tgid)
        route_node(ts, (const void *)node);
    return 0;
}

#if !AGGREGATE
struct graph_seen {
    u64 build;     // the graph build it was last described in
    u64 uses;      // computations of it since
};
BPF_HASH(graphs_seen, u64, struct graph_seen, MAX_GRAPHS);  // by node array and size

// A graph being described, DESCRIBE_CHUNK nodes per program run: graph_begin starts it,
// describe_more (tail-called from graph_begin and then from itself, at most 33 times: the
// kernel's limit, so graphs of up to 33 chunks) goes on. The verifier follows each describe()
// of a chunk, so a chunk is what one program may hold.
#define DESCRIBE_CHUNK 64
struct graph_pass {
    u64 key;          // in graphs_seen
    u64 nodes;        // the graph's node pointers
    u64 ts;           // of its graph-begin event
    u64 build;
    u64 force;        // send every node (a refresh)
    u64 flags;        // describe()'s, or-ed
    u32 n_nodes;
    u32 next;         // the first node not yet described
};
BPF_PERCPU_ARRAY(graph_passes, struct graph_pass, 1);
BPF_PROG_ARRAY(describe_chunks, 1);

// Start describing the nodes of a graph about to be computed, unless it was described since
// it was last built (GRAPH_BUILDS); at every REFRESH_EVERY-th computation, all of them again.
static __always_inline void describe_graph(struct pt_regs *ctx, u64 ts, const u8 *cgraph,
                                           int n_nodes) {
    int zero = 0;
    u64 nodes = 0;
    read_user(&nodes, 8, cgraph + CGRAPH_NODES);
    if (!nodes || n_nodes <= 0)
        return;
    // A graph by its node array and size, not its own address: a view of a graph (a slice of
    // its nodes, as a scheduler with an eval callback computes) is made on the stack, each at
    // the same address.
    u64 key = nodes | ((u64)(n_nodes & 0xffff) << 48);
    u64 *builds = graph_builds.lookup(&zero);
    u64 build = builds ? *builds : 0;
    struct graph_seen *seen = graphs_seen.lookup(&key);
    u64 force = 0;
    if (seen && seen->build == build) {
        seen->uses++;
        force = seen->uses % REFRESH_EVERY == 0;
        if (GRAPH_BUILDS && !force)
            return;
    }
    struct graph_pass *pass = graph_passes.lookup(&zero);
    if (!pass)
        return;
    pass->key = key;
    pass->nodes = nodes;
    pass->ts = ts;
    pass->build = build;
    pass->force = force;
    pass->flags = 0;
    pass->n_nodes = n_nodes;
    pass->next = 0;
    describe_chunks.call(ctx, 0);
}

// Describe the next chunk of the graph being described; tail-call itself for the one after.
int describe_more(struct pt_regs *ctx) {
    int zero = 0;
    struct graph_pass *pass = graph_passes.lookup(&zero);
    if (!pass)
        return 0;
    u32 first = pass->next;
#pragma nounroll
    for (int i = 0; i < DESCRIBE_CHUNK; i++) {
        if (first + i >= pass->n_nodes)
            break;
        u64 tensor = 0;
        read_user(&tensor, 8, (const void *)(pass->nodes + (u64)(first + i) * 8));
        if (tensor)
            pass->flags |= describe(pass->ts, (const void *)tensor, pass->force);
    }
    pass->next = first + DESCRIBE_CHUNK;
    if (pass->next < pass->n_nodes) {
        describe_chunks.call(ctx, 0);
        // Past the kernel's tail calls: the rest is not described, counted once as a lost
        // descriptor, and not tried again before the graph's next build or refresh.
        count_lost(RING_NODES);
    }
    u64 key = pass->key;
    if (pass->flags & LOST) {
        graphs_seen.delete(&key);  // described again at its next computation
    } else {
        struct graph_seen *seen = graphs_seen.lookup(&key);
        if (!seen || seen->build != pass->build) {
            struct graph_seen fresh = {.build = pass->build, .uses = 0};
            graphs_seen.update(&key, &fresh);
        }
    }
    return 0;
}
#endif

// ggml_graph_compute(cgraph, cplan) of the CPU backend (backend id 0).
int graph_begin(struct pt_regs *ctx) {
    if (!tracing())
        return 0;
    new_graph();
    const u8 *cgraph = (const u8 *)PT_REGS_PARM1(ctx);
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct graph_call call = {.cgraph = (u64)cgraph, .caller = (u32)bpf_get_current_pid_tgid()};
    graph_of.update(&tgid, &call);
    struct event *e = begin_event(EV_GRAPH_BEGIN);
    if (!e)
        return 0;
    const u8 *cplan = (const u8 *)PT_REGS_PARM2(ctx);
    int n_nodes = 0, n_threads = 0;
    read_user(&n_nodes, 4, cgraph + CGRAPH_N_NODES);
    read_user(&n_threads, 4, cplan + CPLAN_N_THREADS);
    e->arg0 = (u64)cgraph;
    e->arg1 = (u32)n_nodes | ((u64)(u32)n_threads << 32);
    u64 ts = e->ts;
    submit(e);
#if !AGGREGATE
    describe_graph(ctx, ts, cgraph, n_nodes);
#endif
    return 0;
}

#if BLAS
struct blas_split {
    u64 node[MAX_BLAS_OPS];
};
BPF_PERCPU_ARRAY(blas_scratch, struct blas_split, 1);

// ggml_backend_blas_graph_compute(backend, cgraph): a graph split the BLAS backend runs on the
// calling thread. Its MUL_MAT and OUT_PROD nodes run one after another, each as one or more
// cblas_sgemm calls (blas_call), so the nodes are sent here, in order; user space cuts the
// split into ops at the calls' returns (model/backends.py). At most MAX_BLAS_OPS of them are
// described (the verifier follows every describe()); a split with more is sent without its
// nodes.
int blas_graph_begin(struct pt_regs *ctx) {
    if (!tracing())
        return 0;
    const u8 *cgraph = (const u8 *)PT_REGS_PARM2(ctx);
    int n_nodes = 0;
    const u8 *const *nodes = 0;
    read_user(&n_nodes, 4, cgraph + CGRAPH_N_NODES);
    read_user(&nodes, 8, cgraph + CGRAPH_NODES);
    struct event *e = begin_event(EV_GRAPH_BEGIN);
    if (!e)
        return 0;
    e->arg0 = (u64)cgraph;
    e->arg1 = (u32)n_nodes | ((u64)1 << 32);  // one thread: the caller's
    e->aux = BACKEND_BLAS;
    u64 ts = e->ts;
    submit(e);
    int zero = 0;
    struct blas_split *split = blas_scratch.lookup(&zero);
    if (!split || n_nodes > MAX_BLAS_NODES)
        return 0;
    int found = 0;
#pragma nounroll
    for (int i = 0; i < MAX_BLAS_NODES && i < n_nodes; i++) {
        const u8 *node = 0;
        u32 op = 0;
        read_user(&node, 8, nodes + i);
        if (!node || read_user(&op, 4, node + T_OP) != 0)
            continue;
        if (op != (u32)OP_MUL_MAT && op != (u32)OP_OUT_PROD)
            continue;
        if (found == MAX_BLAS_OPS)
            return 0;
        split->node[found & (MAX_BLAS_OPS - 1)] = (u64)node;
        found++;
    }
#pragma nounroll
    for (int k = 0; k < MAX_BLAS_OPS && k < found; k++) {
        struct event *n = begin_event(EV_BLAS_NODE);
        if (!n)
            return 0;
        n->ts = ts;
        n->arg0 = split->node[k];
        n->aux = k;
        submit(n);
        describe(ts, (const void *)split->node[k], 0);
    }
    return 0;
}

// A return of cblas_sgemm: in a BLAS graph split, the end of one plane of its current node.
int blas_call(struct pt_regs *ctx) {
    if (!tracing())
        return 0;
    struct event *e = begin_event(EV_BLAS_CALL);
    if (e)
        submit(e);
    return 0;
}
#endif

#if VULKAN
// The Vulkan backend (ggml-vulkan) runs a graph split on the calling thread: it records the
// split's nodes into command buffers one by one (ggml_vk_build_graph, entered for each node
// not fused into the one before, views and empty nodes too), hands them to the device's queue
// now and then (ggml_vk_submit, from within a recording) and later waits for the device
// (ggml_vk_wait_for_fence, from the split or from the backend's synchronize). The split's nodes
// are described as a CPU graph's are, as it begins; user space makes each recording an op
// (model/backends.py).
struct vk_split {
    u64 nodes;     // the split's node pointers
    s32 n_nodes;
    s32 last;      // the index of the node recorded last, -1 for none yet
};
BPF_HASH(vk_splits, u32, struct vk_split, MAX_THREADS);  // by calling thread

// The node at `index` of a node array (0 where it cannot be read).
static __always_inline u64 vk_node_at(u64 nodes, s32 index) {
    u64 node = 0;
    read_user(&node, 8, (const void *)(nodes + (u64)index * 8));
    return node;
}

// The last node fused into the node recorded before `index` (0: none): the backend skips the
// nodes it fused into a recording, so those between the last recording and `index`.
static __always_inline u64 vk_fused_tail(struct vk_split *split, s32 index) {
    if (split->last < 0 || index <= split->last + 1)
        return 0;
    return vk_node_at(split->nodes, index - 1);
}

// ggml_backend_vk_graph_compute(backend, cgraph): a split the Vulkan backend runs.
int vk_graph_begin(struct pt_regs *ctx) {
    if (!tracing())
        return 0;
    const u8 *cgraph = (const u8 *)PT_REGS_PARM2(ctx);
    struct vk_split split = {.nodes = 0, .n_nodes = 0, .last = -1};
    read_user(&split.n_nodes, 4, cgraph + CGRAPH_N_NODES);
    read_user(&split.nodes, 8, cgraph + CGRAPH_NODES);
    u32 tid = (u32)bpf_get_current_pid_tgid();
    vk_splits.update(&tid, &split);
    struct event *e = begin_event(EV_GRAPH_BEGIN);
    if (!e)
        return 0;
    e->arg0 = (u64)cgraph;
    e->arg1 = (u32)split.n_nodes | ((u64)1 << 32);  // one thread: the caller's
    e->aux = BACKEND_VULKAN;
    u64 ts = e->ts;
    submit(e);
#if !AGGREGATE
    describe_graph(ctx, ts, cgraph, split.n_nodes);  // a tail call: nothing runs after it
#endif
    return 0;
}

// Its return: a graph end whose arg1 is the last node fused into the split's last recording.
int vk_graph_end(struct pt_regs *ctx) {
    if (!tracing())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct vk_split *split = vk_splits.lookup(&tid);
    struct event *e = begin_event(EV_GRAPH_END);
    if (!e)
        return 0;
    e->arg0 = PT_REGS_RC(ctx);
    e->aux = BACKEND_VULKAN;
    if (split) {
        e->arg1 = vk_fused_tail(split, split->n_nodes);
        vk_splits.delete(&tid);
    }
    submit(e);
    return 0;
}

// ggml_vk_build_graph(ctx, cgraph, node_idx, ...): records node `node_idx` of the split.
int vk_node_begin(struct pt_regs *ctx) {
    if (!tracing())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct vk_split *split = vk_splits.lookup(&tid);
    if (!split)
        return 0;
    s32 index = (s32)PT_REGS_PARM3(ctx);
    struct event *e = begin_event(EV_VK_NODE);
    if (!e)
        return 0;
    e->arg0 = vk_node_at(split->nodes, index);
    e->arg1 = vk_fused_tail(split, index);
    e->aux = (u32)index;
    split->last = index;
    submit(e);
    return 0;
}

int vk_node_end(struct pt_regs *ctx) {
    if (!tracing())
        return 0;
    struct event *e = begin_event(EV_VK_NODE_END);
    if (!e)
        return 0;
    e->arg0 = PT_REGS_RC(ctx) & 0xff;  // a bool
    submit(e);
    return 0;
}

// A host call of the backend begins or returns (`call`: HOST_*), moving `bytes` if it copies.
static __always_inline int host_call(u8 kind, u32 call, u64 bytes) {
    if (!tracing())
        return 0;
    struct event *e = begin_event(kind);
    if (!e)
        return 0;
    e->aux = call;
    e->arg0 = bytes;
    submit(e);
    return 0;
}

int vk_submit_begin(struct pt_regs *ctx) { return host_call(EV_HOST_CALL_BEGIN, HOST_SUBMIT, 0); }
int vk_submit_end(struct pt_regs *ctx) { return host_call(EV_HOST_CALL_END, HOST_SUBMIT, 0); }
int vk_wait_begin(struct pt_regs *ctx) { return host_call(EV_HOST_CALL_BEGIN, HOST_WAIT, 0); }
int vk_wait_end(struct pt_regs *ctx) { return host_call(EV_HOST_CALL_END, HOST_WAIT, 0); }

// ggml_backend_vk_buffer_set_tensor / _get_tensor(buffer, tensor, data, offset, size), and the
// backend's ggml_backend_vk_set_tensor_async / _get_tensor_async(backend, tensor, data, offset,
// size).
int vk_to_device_begin(struct pt_regs *ctx) {
    return host_call(EV_HOST_CALL_BEGIN, HOST_TO_DEVICE, PT_REGS_PARM5(ctx));
}
int vk_to_device_end(struct pt_regs *ctx) {
    return host_call(EV_HOST_CALL_END, HOST_TO_DEVICE, 0);
}
int vk_from_device_begin(struct pt_regs *ctx) {
    return host_call(EV_HOST_CALL_BEGIN, HOST_FROM_DEVICE, PT_REGS_PARM5(ctx));
}
int vk_from_device_end(struct pt_regs *ctx) {
    return host_call(EV_HOST_CALL_END, HOST_FROM_DEVICE, 0);
}

// ggml_backend_vk_cpy_tensor_async(backend_src, backend_dst, src, dst): the bytes of `src`,
// a contiguous tensor (the scheduler's copies of a split's inputs): ne[3] * nb[3].
int vk_copy_async_begin(struct pt_regs *ctx) {
    const u8 *src = (const u8 *)PT_REGS_PARM3(ctx);
    s64 ne3 = 0;
    u64 nb3 = 0;
    read_user(&ne3, 8, src + T_NE + 24);
    read_user(&nb3, 8, src + T_NB + 24);
    return host_call(EV_HOST_CALL_BEGIN, HOST_COPY_ASYNC, (u64)ne3 * nb3);
}
int vk_copy_async_end(struct pt_regs *ctx) {
    return host_call(EV_HOST_CALL_END, HOST_COPY_ASYNC, 0);
}

// With GGML_VK_PERF_LOGGER set (record --gpu-timestamps) the backend writes a GPU timestamp
// query as each split begins and after each node it records, then, the split waited for, reads
// them all with the Vulkan loader's vkGetQueryPoolResults(device, pool, first, count,
// data_size, data, stride, flags) (stride 8: 64-bit values). Its return sends each value read
// (VK_TIMESTAMP: the value, its index, how many), up to MAX_VK_QUERIES of them.
#define MAX_VK_QUERIES 2048
struct vk_query {
    u64 data;
    u32 count;
};
BPF_HASH(vk_queries, u32, struct vk_query, MAX_THREADS);  // by calling thread

int vk_query_begin(struct pt_regs *ctx) {
    if (!tracing())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct vk_query query = {.data = PT_REGS_PARM6(ctx), .count = (u32)PT_REGS_PARM4(ctx)};
    vk_queries.update(&tid, &query);
    return 0;
}

int vk_query_end(struct pt_regs *ctx) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct vk_query *query = vk_queries.lookup(&tid);
    if (!query)
        return 0;
    struct vk_query got = *query;
    vk_queries.delete(&tid);
    if (!tracing() || PT_REGS_RC(ctx) != 0)  // VK_SUCCESS only: else the values are not there
        return 0;
    for (u32 i = 0; i < MAX_VK_QUERIES; i++) {
        if (i >= got.count)
            break;
        struct event *e = begin_event(EV_VK_TIMESTAMP);
        if (!e)
            return 0;
        read_user(&e->arg0, 8, (const void *)(got.data + (u64)i * 8));
        e->arg1 = got.count;
        e->aux = i;
        submit(e);
    }
    return 0;
}
#endif

// A return of a graph or token function, with its return value.
static __always_inline int returned(struct pt_regs *ctx, u8 kind) {
    struct event *e = begin_event(kind);
    if (!e)
        return 0;
    e->arg0 = PT_REGS_RC(ctx);
    submit(e);
    return 0;
}

int graph_end(struct pt_regs *ctx) {
    if (!tracing())
        return 0;
#if AGGREGATE
    int zero = 0;
    u64 now = bpf_ktime_get_boot_ns();
    last_graph_end.update(&zero, &now);
    close_share((u32)bpf_get_current_pid_tgid(), now);
#endif
    return returned(ctx, EV_GRAPH_END);
}

// A token step begins; returns its event's time (0: not traced).
static __always_inline u64 token_begin(u32 entry, s64 n_tokens, u64 seqs) {
#if GATED
    int zero = 0;
    struct gate *g = gate.lookup(&zero);
    u64 *on = armed.lookup(&zero);
    if (g) {
        u64 step = g->step++;
        int attached = on && *on;
        g->tracing = attached && chosen(step);
#if DETACH
        if ((chosen(step) || chosen(step + 1)) != attached)
            steer.ringbuf_output(&step, sizeof(step), BPF_RB_FORCE_WAKEUP);
#endif
    }
#endif
    struct event *e = begin_event(EV_TOKEN_BEGIN);
    if (!e)
        return 0;
    e->arg0 = (u64)n_tokens;
    e->arg1 = seqs;
    e->aux = entry;
    u64 ts = e->ts;
    submit(e);
    return ts;
}

// llama_decode / llama_encode(ctx, struct llama_batch batch): the 56-byte struct is passed in
// memory: on the stack on x86-64, by reference on arm64.
static __always_inline const u8 *batch_at(struct pt_regs *ctx) {
#if defined(__TARGET_ARCH_x86) || defined(__x86_64__)
    return (const u8 *)(PT_REGS_SP(ctx) + 8);
#elif defined(__TARGET_ARCH_arm64) || defined(__aarch64__)
    return (const u8 *)PT_REGS_PARM2(ctx);
#else
    return 0;
#endif
}

// The sequences of the batch being scanned, sent beside its token step's event. Run r (r <=
// BATCH_RUNS) is in slot r; later runs all go to slot BATCH_RUNS + 1, which user space ignores
// (slot BATCH_RUNS's start ends run BATCH_RUNS - 1).
struct batch {
    u64 ts;                    // the step's TOKEN_BEGIN ts
    u32 tid;
    u32 n_runs;                // runs counted
    u32 scanned;               // tokens scanned (the batch's, up to BATCH_SCAN)
    u32 pos_known;             // the batch gives positions
    s32 seq[BATCH_SLOTS];      // each run's sequence id
    s32 pos[BATCH_SLOTS];      // its first token's position
    u32 start[BATCH_SLOTS];    // its first token
};
BPF_PERCPU_ARRAY(batch_scratch, struct batch, 1);
BPF_RINGBUF_OUTPUT(batches, BATCH_PAGES);

// Runs of one sequence id among a batch's first BATCH_SCAN tokens, into `b`: token i's sequence
// is the int at (pointer at `base + i * stride`) + value_at (0 where that pointer is NULL), its
// position the int at `pos_base + i * pos_stride`. Tokens of one sequence are consecutive in
// the batches llama.cpp's tools build, so runs are sequences. Each token costs the verifier
// three jumps (of 8192 on one path): the run's slot is computed without a branch, and the count
// lives in the map value (read back from memory, a number the verifier does not follow, so the
// loop's states stay few).
static __always_inline u32 seq_runs(u64 base, u64 stride, u64 value_at, s64 n_tokens,
                                    u64 pos_base, u64 pos_stride, struct batch *b) {
    b->n_runs = 0;
    b->scanned = 0;
    b->pos_known = pos_base != 0;
    if (!base)
        return 0;
    s32 last = 0x7fffffff;
    for (int i = 0; i < BATCH_SCAN; i++) {
        if (i >= n_tokens)
            break;
        u64 p = 0;
        s32 seq = 0;
        read_user(&p, 8, (void *)(base + i * stride));
        read_user(&seq, 4, (void *)(p + value_at));
        if (seq != last) {
            u32 r = b->n_runs;
            b->n_runs = r + 1;
            s64 past = ((s64)BATCH_RUNS - (s64)r) >> 63;  // -1 past slot BATCH_RUNS, else 0
            u32 k = ((r & ~past) | ((BATCH_RUNS + 1) & past)) & (BATCH_SLOTS - 1);
            s32 pos = 0;
            read_user(&pos, 4, (void *)(pos_base + i * pos_stride));
            b->seq[k] = seq;
            b->pos[k] = pos;
            b->start[k] = i;
        }
        last = seq;
        b->scanned = i + 1;
    }
    return b->n_runs;
}

// Send a traced step's batch (`ts`: its event's time).
static __always_inline void send_batch(u64 ts, struct batch *b) {
    if (!ts || !b->n_runs)
        return;
    b->ts = ts;
    b->tid = (u32)bpf_get_current_pid_tgid();
    if (batches.ringbuf_output(b, sizeof(*b), BPF_RB_NO_WAKEUP))
        count_lost(RING_BATCHES);
}

// A TOKEN_BEGIN's arg1: the batch's first position in the low 32 bits (-1: not known) and its
// sequences (seq_runs; 0: it names none, it is sequence 0's) in the high 32 bits.
static __always_inline u64 step_seqs(s32 first_pos, u32 runs) {
    return (u64)(u32)first_pos | ((u64)runs << 32);
}

// llama_batch: arrays of positions and of per-token sequence id arrays (NULL: left to the
// KV cache, and sequence 0).
static __always_inline int batch_begin(struct pt_regs *ctx, u32 entry) {
    int zero = 0;
    struct batch *b = batch_scratch.lookup(&zero);
    if (!b)
        return 0;
    const u8 *batch = batch_at(ctx);
    int n_tokens = -1;
    u64 pos = 0, seq_ids = 0;
    read_user(&n_tokens, 4, batch + BATCH_N_TOKENS);
    read_user(&pos, 8, batch + BATCH_POS);
    read_user(&seq_ids, 8, batch + BATCH_SEQ_ID);
    s32 first_pos = -1;
    if (pos)
        read_user(&first_pos, 4, (void *)pos);
    u32 runs = seq_runs(seq_ids, 8, 0, n_tokens, pos, 4, b);
    send_batch(token_begin(entry, n_tokens, step_seqs(first_pos, runs)), b);
    return 0;
}

int decode_begin(struct pt_regs *ctx) { return batch_begin(ctx, TOKEN_DECODE); }
int encode_begin(struct pt_regs *ctx) { return batch_begin(ctx, TOKEN_ENCODE); }

// llama_process(ctx, type, llama_batch_ext *batch): type 0 encodes, 1 decodes; the batch
// holds a std::vector of BATCH_EXT_TOKEN_SIZE-byte tokens at BATCH_EXT_TOKENS.
// Each token holds its positions at BATCH_EXT_POS and a std::unordered_set of sequence ids at
// BATCH_EXT_SEQ_IDS (0 where the build did not show them), whose first node libstdc++ keeps
// USET_FIRST bytes in, with the value USET_NODE_VALUE bytes into the node.
int process_begin(struct pt_regs *ctx) {
    int zero = 0;
    struct batch *b = batch_scratch.lookup(&zero);
    if (!b)
        return 0;
    const u8 *batch = (const u8 *)PT_REGS_PARM3(ctx);
    u64 tokens[2] = {0, 0};
    read_user(tokens, sizeof(tokens), batch + BATCH_EXT_TOKENS);
    s64 n_tokens = (tokens[1] - tokens[0]) / BATCH_EXT_TOKEN_SIZE;
    s32 first_pos = -1;
    if (BATCH_EXT_POS && n_tokens > 0)
        read_user(&first_pos, 4, (void *)(tokens[0] + BATCH_EXT_POS));
    b->n_runs = 0;
    u32 runs = 0;
    if (BATCH_EXT_SEQ_IDS && n_tokens > 0)
        runs = seq_runs(tokens[0] + BATCH_EXT_SEQ_IDS + USET_FIRST, BATCH_EXT_TOKEN_SIZE,
                        USET_NODE_VALUE, n_tokens,
                        BATCH_EXT_POS ? tokens[0] + BATCH_EXT_POS : 0, BATCH_EXT_TOKEN_SIZE, b);
    send_batch(token_begin(PT_REGS_PARM2(ctx) == 0 ? TOKEN_ENCODE : TOKEN_DECODE, n_tokens,
                           step_seqs(first_pos, runs)), b);
    return 0;
}

int token_end(struct pt_regs *ctx) { return returned(ctx, EV_TOKEN_END); }
