-- op_summary: where the time goes, per op type and tensor role, prefill vs decode.
-- One row per (phase, backend, op, role). An op instance is one graph node; its time runs from
-- the first thread's start to the last thread's end of its share. A GPU backend's (Vulkan0)
-- node time is the host's recording of its commands, not the device's work (that is in the
-- host's `wait for device`: graph_summary; device time per op: backend_split).
-- columns:
--   phase      prefill, decode, mixed or encode (profinfer_step)
--   backend    the backend whose graph ran the node (CPU, BLAS, Vulkan0, ...)
--   op, role   the ggml op (RMS_NORM+MUL for a fused pair) and the tensor's role (ffn_gate, ...)
--   count      op instances
--   total_ns, mean_ns, p50_ns, p90_ns, max_ns   instance time (percentiles: nearest rank)
--   share      total_ns over the phase's token-step time

INCLUDE PERFETTO MODULE profinfer.prelude.steps;
INCLUDE PERFETTO MODULE profinfer.prelude.node_ranks;

CREATE PERFETTO VIEW profinfer_op_summary AS
WITH grouped AS (
  SELECT grp, COUNT(*) AS n, MIN(rowid) AS first, SUM(dur) AS total_ns, AVG(dur) AS mean,
         MAX(dur) AS max_ns
  FROM profinfer_node_by_dur
  GROUP BY grp
),
phase_time AS (SELECT phase, SUM(dur) AS ns FROM profinfer_step GROUP BY phase)
SELECT k.phase, k.backend, k.op, k.role, g.n AS count, g.total_ns,
       CAST(ROUND(g.mean) AS INTEGER) AS mean_ns,
       (SELECT dur FROM profinfer_node_by_dur WHERE rowid = g.first + (g.n + 1) / 2 - 1) AS p50_ns,
       (SELECT dur FROM profinfer_node_by_dur WHERE rowid = g.first + (9 * g.n + 9) / 10 - 1)
         AS p90_ns,
       g.max_ns,
       ROUND(1.0 * g.total_ns / p.ns, 4) AS share
FROM grouped g JOIN profinfer_node_group k USING (grp) JOIN phase_time p USING (phase)
ORDER BY k.phase DESC, g.total_ns DESC, k.backend, k.op, k.role;
