-- op_summary: where the time goes, per op type and tensor role, prefill vs decode.
-- One row per (phase, op, role). An op instance is one graph node; its time runs from the
-- first thread's start to the last thread's end of its share.
-- columns:
--   phase      prefill, decode or encode
--   op, role   the ggml op (RMS_NORM+MUL for a fused pair) and the tensor's role (ffn_gate, ...)
--   count      op instances
--   total_ns, mean_ns, p50_ns, p90_ns, max_ns   instance time (percentiles: nearest rank)
--   share      total_ns over the phase's token-step time
WITH grouped AS (
  SELECT phase, op, role, COUNT(*) AS n, MIN(rowid) AS first, SUM(dur) AS total_ns,
         AVG(dur) AS mean, MAX(dur) AS max_ns
  FROM profinfer_node_by_dur
  GROUP BY phase, op, role
),
phase_time AS (SELECT phase, SUM(dur) AS ns FROM profinfer_step GROUP BY phase)
SELECT g.phase, g.op, g.role, g.n AS count, g.total_ns,
       CAST(ROUND(g.mean) AS INTEGER) AS mean_ns,
       (SELECT dur FROM profinfer_node_by_dur WHERE rowid = g.first + (g.n + 1) / 2 - 1) AS p50_ns,
       (SELECT dur FROM profinfer_node_by_dur WHERE rowid = g.first + (9 * g.n + 9) / 10 - 1)
         AS p90_ns,
       g.max_ns,
       ROUND(1.0 * g.total_ns / p.ns, 4) AS share
FROM grouped g JOIN phase_time p USING (phase)
ORDER BY g.phase DESC, g.total_ns DESC, g.op, g.role;
