-- profinfer prelude: the tables every canned metric reads, built from trace_processor's
-- `slice`, `args`, `thread_track` and `thread` tables as profinfer-perfetto's traces fill them.
-- A query (canned or --sql) gets the tables it names built first, with the ones they read; each
-- table is built once per trace, on either engine. Each statement here starts a table's section:
-- a CREATE TABLE (or VIEW), then its indexes. Arg keys are `debug.` + the names in model/names.py.
--
--   profinfer_step   one row per token step: step, phase (prefill, decode, mixed, encode),
--                    n_tokens, sequences (in its batch), pos (its first token's position, NULL
--                    where unknown), kv_len (pos + n_tokens for a one-sequence batch), ts, dur
--   profinfer_seq_step  one row per (sequence, token step that held its tokens): seq, step,
--                    n_tokens (its tokens in the step), pos (its first one's position, NULL
--                    where unknown), ts, dur (the step's)
--   profinfer_graph  one row per graph: graph, step, phase, backend, n_nodes, n_threads, ts, dur
--   profinfer_op     one row per op slice (one thread's share of a node): ts, dur (work),
--                    wait (its barrier wait), tid, graph, step, phase, node, op, subop,
--                    tensor, role, layer, dtype, src0_dtype, flops, bytes, arg_set_id
--   profinfer_node   one row per graph node: graph, node, step, phase, backend (its graph's),
--                    op, role, layer, tensor, dtype, src0_dtype, src0 (type and shape of its
--                    first source: a matmul's weights), flops, bytes, threads, ts (first
--                    thread's start), dur (to the last thread's end), work, slowest, fastest,
--                    wait (summed over threads)
--   profinfer_kv_point  one row per attention node (FLASH_ATTN_EXT, SOFT_MAX, or a kq, kqv,
--                    kq_soft_max or kq_mask role) of a one-sequence decode step with a known KV
--                    length: op, role, layer, kv_len (pos + n_tokens, real), dur (real)
--   profinfer_peak   one row per roof of the machine the trace was recorded on (`calibrate`):
--                    kind (memory: GB/s; compute: GFLOP/s of matmuls with weights of dtype),
--                    dtype, threads, value
--   profinfer_route  one row per (MoE op execution, token, expert): graph, node, step, phase,
--                    layer, token, at (the token's place in the run), expert
--   profinfer_runnable  (record --sched) one row per time an inference thread (one with token
--                    steps, graphs or ops) was runnable but not running: utid, tid, ts, dur,
--                    state, preempted (1: it was switched out while runnable, R+ or, on
--                    kernels whose preemption is lazy (6.13+), R with no waker; 0: it was woken
--                    and waited for a CPU), cpu (where it then ran)
--   profinfer_other_run (record --sched) one row per time another task (any but the idle task
--                    and the inference threads) ran on the target's CPUs: utid, tid, thread,
--                    pid, process, cpu, ts, dur
--   profinfer_contended (record --sched) the times the target wanted CPUs: each a token step or
--                    a time an inference thread waited for one, overlapping ones merged: ts, dur
--   profinfer_step_interference (record --sched) one row per token step: step, phase, ts, dur,
--                    waiting (summed over threads), preempted (its part after a preemption),
--                    stalled (time in which any inference thread waited), others (other
--                    tasks' run time on the target's CPUs)
--
-- An op slice is a slice with a `node` arg. One op slice per graph node (the calling thread's)
-- refers to the node's description (op, tensor, role, shapes, flops, bytes) by its number
-- (`description`); the first op slice of the trace with a number carries the description's
-- args too (profinfer_desc). The other threads' shares carry `node` alone (and their own
-- counter counts).
-- profinfer_op and profinfer_node are views: their times are tables of numbers
-- (profinfer_op_times, profinfer_node_times; a node's `node_args` is the arg set describing it;
-- barrier waits in profinfer_op_times and profinfer_node_wait, so that a metric of node times
-- alone, like op_summary, never matches a million waits to their ops),
-- their names and work come from the few pivoted arg sets (profinfer_slice_args), so no text is
-- carried through a million rows. profinfer_op's arg_set_id is the slice's own (its counters).
-- profinfer_node_by_dur holds each node's dur under its (phase, op, role) group number
-- (profinfer_node_group: the phase's number, from profinfer_phase_no, times a million plus the
-- (op, role)'s, from profinfer_op_role_no), sorted by both: a group's rows are consecutive and
-- their rowids rank them by dur, so a nearest-rank percentile is one rowid lookup (no window
-- function, no sort on text).
--
-- For speed on trace_processor, whose `slice`, `thread_track` and `thread` are virtual tables,
-- each step first copies the few rows it needs (slices picked by their arg set or name) into a
-- table of its own and joins only such tables: a join of a large table with a virtual one can
-- make SQLite's planner scan the virtual one per row (minutes on a 1 M-op trace). Arg sets are
-- few (one per distinct set of args), so pivoting them is cheap. `+arg_set_id IN (...)` keeps
-- the built-in engine's SQLite from indexing all of `slice` to pick the op slices (4x slower).

CREATE TABLE profinfer_slice_args AS
SELECT
  arg_set_id,
  MAX(CASE WHEN key = 'debug.op' THEN string_value END) AS op,
  MAX(CASE WHEN key = 'debug.subop' THEN string_value END) AS subop,
  MAX(CASE WHEN key = 'debug.tensor' THEN string_value END) AS tensor,
  MAX(CASE WHEN key = 'debug.role' THEN string_value END) AS role,
  MAX(CASE WHEN key = 'debug.layer' THEN int_value END) AS layer,
  MAX(CASE WHEN key = 'debug.node' THEN int_value END) AS node,
  MAX(CASE WHEN key = 'debug.description' THEN int_value END) AS description,
  MAX(CASE WHEN key = 'debug.dtype' THEN string_value END) AS dtype,
  MAX(CASE WHEN key = 'debug.src0_dtype' THEN string_value END) AS src0_dtype,
  MAX(CASE WHEN key = 'debug.src0' THEN string_value END) AS src0,
  MAX(CASE WHEN key = 'debug.flops' THEN int_value END) AS flops,
  MAX(CASE WHEN key = 'debug.bytes' THEN int_value END) AS bytes,
  MAX(CASE WHEN key = 'debug.graph' THEN int_value END) AS graph,
  MAX(CASE WHEN key = 'debug.backend' THEN string_value END) AS backend,
  MAX(CASE WHEN key = 'debug.token_step' THEN int_value END) AS token_step,
  MAX(CASE WHEN key = 'debug.n_nodes' THEN int_value END) AS n_nodes,
  MAX(CASE WHEN key = 'debug.n_threads' THEN int_value END) AS n_threads,
  MAX(CASE WHEN key = 'debug.step' THEN int_value END) AS step,
  MAX(CASE WHEN key = 'debug.phase' THEN string_value END) AS phase,
  MAX(CASE WHEN key = 'debug.n_tokens' THEN int_value END) AS n_tokens,
  MAX(CASE WHEN key = 'debug.sequences' THEN int_value END) AS sequences,
  MAX(CASE WHEN key = 'debug.pos' THEN int_value END) AS pos,
  MAX(CASE WHEN key = 'debug.experts' THEN string_value END) AS experts,
  MAX(CASE WHEN key = 'debug.routed_tokens' THEN int_value END) AS routed_tokens,
  MAX(CASE WHEN key = 'debug.seq' THEN int_value END) AS seq,
  MAX(CASE WHEN key = 'debug.seq_tokens' THEN int_value END) AS seq_tokens,
  MAX(CASE WHEN key = 'debug.seq_pos' THEN int_value END) AS seq_pos,
  MAX(CASE WHEN key = 'debug.peak_kind' THEN string_value END) AS peak_kind,
  MAX(CASE WHEN key = 'debug.peak_dtype' THEN string_value END) AS peak_dtype,
  MAX(CASE WHEN key = 'debug.peak_threads' THEN int_value END) AS peak_threads,
  MAX(CASE WHEN key = 'debug.peak_value' THEN real_value END) AS peak_value
FROM args
WHERE key IN ('debug.op', 'debug.subop', 'debug.tensor', 'debug.role', 'debug.layer',
              'debug.node', 'debug.description', 'debug.dtype', 'debug.src0_dtype',
              'debug.src0', 'debug.flops', 'debug.bytes', 'debug.graph',
              'debug.backend', 'debug.token_step', 'debug.n_nodes', 'debug.n_threads',
              'debug.step', 'debug.phase', 'debug.n_tokens', 'debug.sequences', 'debug.pos',
              'debug.experts', 'debug.routed_tokens', 'debug.seq', 'debug.seq_tokens',
              'debug.seq_pos', 'debug.peak_kind', 'debug.peak_dtype', 'debug.peak_threads',
              'debug.peak_value')
GROUP BY arg_set_id;

CREATE INDEX profinfer_slice_args_id ON profinfer_slice_args (arg_set_id);

CREATE TABLE profinfer_step AS
SELECT a.step, a.phase, a.n_tokens, COALESCE(a.sequences, 1) AS sequences, a.pos,
       CASE WHEN COALESCE(a.sequences, 1) = 1 THEN a.pos + a.n_tokens END AS kv_len, s.ts, s.dur,
       s.id AS slice_id
FROM (SELECT id, ts, dur, arg_set_id FROM slice WHERE +arg_set_id IN
        (SELECT arg_set_id FROM profinfer_slice_args
         WHERE phase IS NOT NULL AND step IS NOT NULL)) s
JOIN profinfer_slice_args a USING (arg_set_id);

-- Each (sequence, step) slice has args of its own (they name the step), so the arg sets alone
-- are the rows.
CREATE TABLE profinfer_seq_step AS
SELECT a.seq, a.token_step AS step, a.seq_tokens AS n_tokens, a.seq_pos AS pos, st.ts, st.dur
FROM profinfer_slice_args a
JOIN profinfer_step st ON st.step = a.token_step
WHERE a.seq IS NOT NULL;

CREATE TABLE profinfer_graph_slice AS
SELECT s.id AS slice_id, s.ts, s.dur, a.graph, s.arg_set_id
FROM (SELECT id, ts, dur, arg_set_id FROM slice WHERE +arg_set_id IN
        (SELECT arg_set_id FROM profinfer_slice_args WHERE graph IS NOT NULL)) s
JOIN profinfer_slice_args a USING (arg_set_id);
CREATE INDEX profinfer_graph_slice_id ON profinfer_graph_slice (slice_id);

CREATE TABLE profinfer_graph AS
SELECT a.graph, a.token_step AS step, st.phase, a.backend, a.n_nodes, a.n_threads,
       MIN(gs.ts) AS ts, MAX(gs.dur) AS dur
FROM profinfer_graph_slice gs
JOIN profinfer_slice_args a USING (arg_set_id)
LEFT JOIN profinfer_step st ON st.step = a.token_step
GROUP BY a.graph;
CREATE INDEX profinfer_graph_id ON profinfer_graph (graph);

CREATE TABLE profinfer_thread_track AS
SELECT tt.id AS track_id, t.tid FROM thread_track tt JOIN thread t USING (utid);
CREATE INDEX profinfer_thread_track_id ON profinfer_thread_track (track_id);

-- A thread's barrier wait after an op: the slice that starts where the op's slice ends, under
-- the same graph slice.
CREATE TABLE profinfer_wait AS
SELECT parent_id, ts, dur FROM slice WHERE name = 'barrier wait';
CREATE UNIQUE INDEX profinfer_wait_at ON profinfer_wait (parent_id, ts);

-- A node description's arg set: the one op slice with its number that carries its args. (A
-- trace written before descriptions were numbered has them on every slice that refers to one.)
CREATE TABLE profinfer_desc AS
SELECT description, MIN(arg_set_id) AS node_args
FROM profinfer_slice_args WHERE description IS NOT NULL AND op IS NOT NULL
GROUP BY description;
CREATE UNIQUE INDEX profinfer_desc_id ON profinfer_desc (description);

CREATE VIEW profinfer_op_rows AS
SELECT o.id AS slice_id, o.ts, o.dur, o.track_id, o.parent_id, gs.graph, a.node, o.arg_set_id,
       COALESCE(d.node_args, CASE WHEN a.op IS NOT NULL THEN o.arg_set_id END) AS node_args
FROM (SELECT id, ts, dur, track_id, parent_id, arg_set_id FROM slice WHERE +arg_set_id IN
        (SELECT arg_set_id FROM profinfer_slice_args WHERE node IS NOT NULL)) o
JOIN profinfer_slice_args a USING (arg_set_id)
LEFT JOIN profinfer_desc d USING (description)
JOIN profinfer_graph_slice gs ON gs.slice_id = o.parent_id;

CREATE TABLE profinfer_node_times AS
SELECT graph, node, COUNT(*) AS threads, MIN(ts) AS ts, MAX(ts + dur) - MIN(ts) AS dur,
       SUM(dur) AS work, MAX(dur) AS slowest, MIN(dur) AS fastest, MAX(node_args) AS node_args
FROM profinfer_op_rows
GROUP BY graph, node;
CREATE UNIQUE INDEX profinfer_node_times_id ON profinfer_node_times (graph, node);

CREATE TABLE profinfer_op_times AS
SELECT o.slice_id, o.ts, o.dur, COALESCE(w.dur, 0) AS wait, t.tid, o.graph, o.node, o.arg_set_id
FROM profinfer_op_rows o
JOIN profinfer_thread_track t USING (track_id)
LEFT JOIN profinfer_wait w ON w.parent_id = o.parent_id AND w.ts = o.ts + o.dur;

CREATE TABLE profinfer_node_wait AS
SELECT graph, node, SUM(wait) AS wait FROM profinfer_op_times GROUP BY graph, node;
CREATE UNIQUE INDEX profinfer_node_wait_id ON profinfer_node_wait (graph, node);

CREATE VIEW profinfer_op AS
SELECT o.slice_id, o.ts, o.dur, o.wait, o.tid, o.graph, g.step, g.phase, o.node, a.op, a.subop,
       a.tensor, a.role, a.layer, a.dtype, a.src0_dtype, a.flops, a.bytes, o.arg_set_id
FROM profinfer_op_times o
JOIN profinfer_node_times n USING (graph, node)
JOIN profinfer_slice_args a ON a.arg_set_id = n.node_args
JOIN profinfer_graph g USING (graph);

CREATE VIEW profinfer_node AS
SELECT n.graph, n.node, g.step, g.phase, g.backend, a.op, a.role, a.layer, a.tensor, a.dtype,
       a.src0_dtype, a.src0, a.flops, a.bytes, n.threads, n.ts, n.dur, n.work, n.slowest,
       n.fastest, w.wait
FROM profinfer_node_times n
JOIN profinfer_node_wait w USING (graph, node)
JOIN profinfer_slice_args a ON a.arg_set_id = n.node_args
JOIN profinfer_graph g USING (graph);

CREATE TABLE profinfer_phase_no AS
SELECT g.graph, g.phase, p.no
FROM profinfer_graph g
JOIN (SELECT phase, ROW_NUMBER() OVER (ORDER BY phase) AS no
      FROM (SELECT DISTINCT phase FROM profinfer_graph WHERE phase IS NOT NULL)) p USING (phase);
CREATE UNIQUE INDEX profinfer_phase_no_id ON profinfer_phase_no (graph);

CREATE TABLE profinfer_op_role_no AS
SELECT a.arg_set_id, r.no, a.op, a.role
FROM profinfer_slice_args a
JOIN (SELECT op, role, ROW_NUMBER() OVER (ORDER BY op, role) AS no
      FROM (SELECT DISTINCT op, role FROM profinfer_slice_args WHERE op IS NOT NULL)) r
  USING (op, role);
CREATE UNIQUE INDEX profinfer_op_role_no_id ON profinfer_op_role_no (arg_set_id);

CREATE TABLE profinfer_node_group AS
SELECT p.no * 1000000 + r.no AS grp, p.phase, r.op, r.role
FROM (SELECT DISTINCT no, phase FROM profinfer_phase_no) p,
     (SELECT DISTINCT no, op, role FROM profinfer_op_role_no) r;
CREATE UNIQUE INDEX profinfer_node_group_id ON profinfer_node_group (grp);

CREATE TABLE profinfer_node_by_dur AS
SELECT p.no * 1000000 + r.no AS grp, n.dur
FROM profinfer_node_times n
JOIN profinfer_phase_no p USING (graph)
JOIN profinfer_op_role_no r ON r.arg_set_id = n.node_args
ORDER BY grp, n.dur;

CREATE TABLE profinfer_peak AS
SELECT a.peak_kind AS kind, COALESCE(a.peak_dtype, '') AS dtype, a.peak_threads AS threads,
       a.peak_value AS value
FROM (SELECT arg_set_id FROM slice WHERE name = 'peak') s
JOIN profinfer_slice_args a USING (arg_set_id);

CREATE VIEW profinfer_kv_point AS
SELECT n.op, n.role, n.layer, 1.0 * s.kv_len AS kv_len, 1.0 * n.dur AS dur
FROM profinfer_node n JOIN profinfer_step s USING (step)
WHERE n.phase = 'decode' AND s.kv_len IS NOT NULL
  AND (n.op IN ('FLASH_ATTN_EXT', 'SOFT_MAX')
       OR n.role IN ('kq', 'kqv', 'kq_soft_max', 'kq_mask'));

-- One row per (Mixture-of-Experts op execution, token, expert chosen), split from the op's
-- `experts` arg: token is its row in the op's ids, at its place in the run's processing order
-- (tokens of earlier steps first; an op that routes fewer tokens than its step has, like the
-- last layer's, routes the step's last ones).
CREATE TABLE profinfer_route AS
WITH RECURSIVE
moe AS (
  SELECT n.graph, n.node, g.step, g.phase, a.layer, a.experts, a.routed_tokens
  FROM profinfer_node_times n
  JOIN profinfer_slice_args a ON a.arg_set_id = n.node_args
  JOIN profinfer_graph g USING (graph)
  WHERE a.experts IS NOT NULL AND g.phase IS NOT NULL
),
base AS (
  SELECT step, n_tokens, SUM(n_tokens) OVER (ORDER BY step) - n_tokens AS first_token
  FROM profinfer_step
),
token (graph, node, step, phase, layer, first, idx, ids, rest) AS (
  SELECT m.graph, m.node, m.step, m.phase, m.layer,
         b.first_token + MAX(b.n_tokens - m.routed_tokens, 0), -1, '', m.experts || ' '
  FROM moe m JOIN base b USING (step)
  UNION ALL
  SELECT graph, node, step, phase, layer, first, idx + 1, SUBSTR(rest, 1, INSTR(rest, ' ') - 1),
         SUBSTR(rest, INSTR(rest, ' ') + 1)
  FROM token WHERE rest <> ''
),
pick (graph, node, step, phase, layer, token, at, expert, rest) AS (
  SELECT graph, node, step, phase, layer, idx, first + idx, '', ids || ','
  FROM token WHERE idx >= 0
  UNION ALL
  SELECT graph, node, step, phase, layer, token, at, SUBSTR(rest, 1, INSTR(rest, ',') - 1),
         SUBSTR(rest, INSTR(rest, ',') + 1)
  FROM pick WHERE rest <> ''
)
SELECT graph, node, step, phase, layer, token, at, CAST(expert AS INTEGER) AS expert
FROM pick WHERE expert <> '';

CREATE TABLE profinfer_inference_thread AS
SELECT DISTINCT t.utid, t.tid FROM thread_track tt JOIN thread t USING (utid);

CREATE TABLE profinfer_runnable AS
SELECT r.utid, i.tid, r.ts, r.dur, r.state,
       CASE WHEN r.state = 'R+' OR r.waker_utid IS NULL THEN 1 ELSE 0 END AS preempted, n.cpu
FROM (SELECT utid, ts, dur, state, waker_utid FROM thread_state
      WHERE state IN ('R', 'R+') AND dur > 0) r
JOIN profinfer_inference_thread i USING (utid)
LEFT JOIN (SELECT utid, ts, cpu FROM thread_state WHERE state = 'Running') n
  ON n.utid = r.utid AND n.ts = r.ts + r.dur;

CREATE TABLE profinfer_other_run AS
SELECT s.utid, t.tid, t.name AS thread, p.pid, p.name AS process, s.cpu, s.ts, s.dur
FROM (SELECT utid, cpu, ts, dur FROM sched WHERE utid <> 0 AND dur > 0
      AND utid NOT IN (SELECT utid FROM profinfer_inference_thread)) s
JOIN thread t USING (utid)
LEFT JOIN process p USING (upid);

-- Merging intervals: in start order, one begins a new merged interval where it starts after
-- every one before it ended; the merged interval spans its group.
CREATE TABLE profinfer_contended AS
WITH span AS (
  SELECT ts AS a, ts + dur AS b FROM profinfer_step
  UNION ALL
  SELECT ts, ts + dur FROM profinfer_runnable
),
ordered AS (
  SELECT a, b, MAX(b) OVER (ORDER BY a, b ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
         AS before
  FROM span
),
grouped AS (
  SELECT a, b, SUM(CASE WHEN before IS NULL OR a > before THEN 1 ELSE 0 END)
         OVER (ORDER BY a, b ROWS UNBOUNDED PRECEDING) AS grp
  FROM ordered
)
SELECT MIN(a) AS ts, MAX(b) - MIN(a) AS dur FROM grouped GROUP BY grp;

-- A step's stalled time is the union of its threads' waits: each wait (clipped to the step)
-- counts from where the ones before it, in start order, ended.
CREATE TABLE profinfer_step_interference AS
WITH piece AS (
  SELECT st.step, r.preempted, MAX(r.ts, st.ts) AS a, MIN(r.ts + r.dur, st.ts + st.dur) AS b
  FROM profinfer_step st JOIN profinfer_runnable r
    ON r.ts < st.ts + st.dur AND r.ts + r.dur > st.ts
),
merged AS (
  SELECT step, preempted, a, b,
         MAX(b) OVER (PARTITION BY step ORDER BY a, b
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
  FROM piece
),
waits AS (
  SELECT step, SUM(b - a) AS waiting, SUM(CASE WHEN preempted = 1 THEN b - a ELSE 0 END)
         AS preempted, SUM(MAX(b - MAX(a, COALESCE(before, a)), 0)) AS stalled
  FROM merged GROUP BY step
),
others AS (
  SELECT st.step, SUM(MIN(o.ts + o.dur, st.ts + st.dur) - MAX(o.ts, st.ts)) AS others
  FROM profinfer_step st JOIN profinfer_other_run o
    ON o.ts < st.ts + st.dur AND o.ts + o.dur > st.ts
  GROUP BY st.step
)
SELECT st.step, st.phase, st.ts, st.dur, COALESCE(w.waiting, 0) AS waiting,
       COALESCE(w.preempted, 0) AS preempted, COALESCE(w.stalled, 0) AS stalled,
       COALESCE(o.others, 0) AS others
FROM profinfer_step st
LEFT JOIN waits w USING (step)
LEFT JOIN others o USING (step);
