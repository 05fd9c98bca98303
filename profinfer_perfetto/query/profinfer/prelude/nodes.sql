-- prelude.nodes: the graphs and each graph node's times.
--
--   profinfer_graph  one row per graph: graph, step, phase, backend, n_nodes, n_threads, ts, dur
--   profinfer_node_times  one row per graph node: graph, node, threads, ts (first thread's
--                    start), dur (to the last thread's end), work, slowest, fastest, node_args
--                    (the arg set describing it)
--
-- An op slice is a slice with a `node` arg. One op slice per graph node (the calling thread's)
-- refers to the node's description (op, tensor, role, shapes, flops, bytes) by its number
-- (`description`); the first op slice of the trace with a number carries the description's
-- args too (profinfer_desc). The other threads' shares carry `node` alone (and their own
-- counter counts).

INCLUDE PERFETTO MODULE profinfer.prelude.steps;

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
