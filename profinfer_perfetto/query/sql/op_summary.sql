-- op_summary: where the time goes, per op type and tensor role, prefill vs decode.
-- One row per (phase, op, role). An op instance is one graph node; its time runs from the
-- first thread's start to the last thread's end of its share.
-- columns:
--   phase      prefill, decode or encode
--   op, role   the ggml op (RMS_NORM+MUL for a fused pair) and the tensor's role (ffn_gate, ...)
--   count      op instances
--   total_ns, mean_ns, p50_ns, p90_ns, max_ns   instance time (percentiles: nearest rank)
--   share      total_ns over the phase's token-step time
WITH ranked AS (
  SELECT phase, op, role, dur,
         ROW_NUMBER() OVER (PARTITION BY phase, op, role ORDER BY dur) AS rn,
         COUNT(*) OVER (PARTITION BY phase, op, role) AS n
  FROM profinfer_node
  WHERE phase IS NOT NULL
),
phase_time AS (SELECT phase, SUM(dur) AS ns FROM profinfer_step GROUP BY phase)
SELECT r.phase, r.op, r.role, COUNT(*) AS count, SUM(r.dur) AS total_ns,
       CAST(ROUND(AVG(r.dur)) AS INTEGER) AS mean_ns,
       MAX(CASE WHEN r.rn = (r.n + 1) / 2 THEN r.dur END) AS p50_ns,
       MAX(CASE WHEN r.rn = (9 * r.n + 9) / 10 THEN r.dur END) AS p90_ns,
       MAX(r.dur) AS max_ns,
       ROUND(1.0 * SUM(r.dur) / p.ns, 4) AS share
FROM ranked r JOIN phase_time p USING (phase)
GROUP BY r.phase, r.op, r.role
ORDER BY r.phase DESC, total_ns DESC, r.op, r.role;
