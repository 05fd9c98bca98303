-- profinfer prelude: the tables every canned metric reads, built from trace_processor's
-- `slice`, `args`, `thread_track` and `thread` tables as profinfer-perfetto's traces fill them.
-- Runs once per trace before the first canned query, on either engine; ad-hoc --sql sees them too.
--
--   profinfer_step   one row per token step: step, phase, n_tokens, pos, kv_len, ts, dur
--   profinfer_graph  one row per graph: graph, step, phase, backend, n_nodes, n_threads, ts, dur
--   profinfer_op     one row per op slice (one thread's share of a node): ts, dur (work),
--                    wait (its barrier wait), tid, graph, step, phase, node, op, subop,
--                    tensor, role, layer, dtype, src0_dtype, flops, bytes, arg_set_id
--   profinfer_node   one row per graph node: ts (first thread's start), dur (to the last
--                    thread's end), work, slowest, fastest, wait (summed over threads), threads

CREATE TABLE profinfer_slice_args AS
SELECT
  arg_set_id,
  MAX(CASE WHEN key = 'debug.op' THEN string_value END) AS op,
  MAX(CASE WHEN key = 'debug.subop' THEN string_value END) AS subop,
  MAX(CASE WHEN key = 'debug.tensor' THEN string_value END) AS tensor,
  MAX(CASE WHEN key = 'debug.role' THEN string_value END) AS role,
  MAX(CASE WHEN key = 'debug.layer' THEN int_value END) AS layer,
  MAX(CASE WHEN key = 'debug.node' THEN int_value END) AS node,
  MAX(CASE WHEN key = 'debug.dtype' THEN string_value END) AS dtype,
  MAX(CASE WHEN key = 'debug.src0_dtype' THEN string_value END) AS src0_dtype,
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
  MAX(CASE WHEN key = 'debug.pos' THEN int_value END) AS pos
FROM args
WHERE key IN ('debug.op', 'debug.subop', 'debug.tensor', 'debug.role', 'debug.layer',
              'debug.node', 'debug.dtype', 'debug.src0_dtype', 'debug.flops', 'debug.bytes', 'debug.graph',
              'debug.backend', 'debug.token_step', 'debug.n_nodes', 'debug.n_threads',
              'debug.step', 'debug.phase', 'debug.n_tokens', 'debug.pos')
GROUP BY arg_set_id;

CREATE INDEX profinfer_slice_args_id ON profinfer_slice_args (arg_set_id);

CREATE TABLE profinfer_step AS
SELECT a.step, a.phase, a.n_tokens, a.pos, a.pos + a.n_tokens AS kv_len, s.ts, s.dur,
       s.id AS slice_id
FROM slice s JOIN profinfer_slice_args a USING (arg_set_id)
WHERE a.phase IS NOT NULL AND a.step IS NOT NULL;

CREATE TABLE profinfer_graph AS
SELECT a.graph, a.token_step AS step, st.phase, a.backend, a.n_nodes, a.n_threads,
       MIN(s.ts) AS ts, MAX(s.dur) AS dur
FROM slice s
JOIN profinfer_slice_args a USING (arg_set_id)
LEFT JOIN profinfer_step st ON st.step = a.token_step
WHERE a.graph IS NOT NULL
GROUP BY a.graph;

CREATE INDEX profinfer_graph_id ON profinfer_graph (graph);

CREATE TABLE profinfer_graph_slice AS
SELECT s.id AS slice_id, a.graph
FROM slice s JOIN profinfer_slice_args a USING (arg_set_id)
WHERE a.graph IS NOT NULL;

CREATE INDEX profinfer_graph_slice_id ON profinfer_graph_slice (slice_id);

CREATE TABLE profinfer_op AS
WITH ordered AS (
  SELECT s.id, s.ts, s.dur, s.track_id, s.parent_id, s.name, s.arg_set_id,
         LEAD(s.name) OVER w AS next_name, LEAD(s.dur) OVER w AS next_dur
  FROM slice s
  WHERE s.depth > 0
  WINDOW w AS (PARTITION BY s.track_id, s.depth ORDER BY s.ts)
)
SELECT o.id AS slice_id, o.ts, o.dur,
       CASE WHEN o.next_name = 'barrier wait' THEN o.next_dur ELSE 0 END AS wait,
       t.tid, gs.graph, g.step, g.phase, a.node, a.op, a.subop, a.tensor, a.role, a.layer,
       a.dtype, a.src0_dtype, a.flops, a.bytes, o.arg_set_id
FROM ordered o
JOIN profinfer_slice_args a USING (arg_set_id)
JOIN profinfer_graph_slice gs ON gs.slice_id = o.parent_id
JOIN profinfer_graph g ON g.graph = gs.graph
JOIN thread_track tt ON tt.id = o.track_id
JOIN thread t USING (utid)
WHERE a.op IS NOT NULL;

CREATE TABLE profinfer_node AS
SELECT graph, node, step, phase, op, role, layer, tensor, dtype, src0_dtype, flops, bytes,
       COUNT(*) AS threads, MIN(ts) AS ts, MAX(ts + dur) - MIN(ts) AS dur,
       SUM(dur) AS work, MAX(dur) AS slowest, MIN(dur) AS fastest, SUM(wait) AS wait
FROM profinfer_op
GROUP BY graph, node;
