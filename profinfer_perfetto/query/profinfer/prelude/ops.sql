-- prelude.ops: op slices with their barrier waits, and the nodes they make up.
--
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
--
-- profinfer_op and profinfer_node are views: their times are tables of numbers
-- (profinfer_op_times, profinfer_node_times; a node's `node_args` is the arg set describing it;
-- barrier waits in profinfer_op_times and profinfer_node_wait, so that a metric of node times
-- alone, like op_summary, never matches a million waits to their ops),
-- their names and work come from the few pivoted arg sets (profinfer_slice_args), so no text is
-- carried through a million rows. profinfer_op's arg_set_id is the slice's own (its counters).

INCLUDE PERFETTO MODULE profinfer.prelude.nodes;

CREATE TABLE profinfer_thread_track AS
SELECT tt.id AS track_id, t.tid FROM thread_track tt JOIN thread t USING (utid);
CREATE INDEX profinfer_thread_track_id ON profinfer_thread_track (track_id);

-- A thread's barrier wait after an op: the slice that starts where the op's slice ends, under
-- the same graph slice.
CREATE TABLE profinfer_wait AS
SELECT parent_id, ts, dur FROM slice WHERE name = 'barrier wait';
CREATE UNIQUE INDEX profinfer_wait_at ON profinfer_wait (parent_id, ts);

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

CREATE VIEW profinfer_kv_point AS
SELECT n.op, n.role, n.layer, 1.0 * s.kv_len AS kv_len, 1.0 * n.dur AS dur
FROM profinfer_node n JOIN profinfer_step s USING (step)
WHERE n.phase = 'decode' AND s.kv_len IS NOT NULL
  AND (n.op IN ('FLASH_ATTN_EXT', 'SOFT_MAX')
       OR n.role IN ('kq', 'kqv', 'kq_soft_max', 'kq_mask'));
