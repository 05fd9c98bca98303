-- backend_split: per op and weights, the time each backend took and which one wins.
-- ProfTime's offloading and ProfStat's across-backends view: with a second backend in the build
-- (BLAS), llama.cpp's scheduler gives it the ops it takes (matmuls of 32 tokens or more) and
-- the CPU backend keeps the rest. Per (phase, op, role, weights) and backend: the nodes it ran,
-- their time and the rate they achieved. Within a (phase, op, role, weights) the backends are
-- compared by GFLOP/s (the work per second; in one run they see different batch sizes, e.g.
-- `llama-bench -ub 16,64` gives the same prompt to the CPU and to BLAS).
-- when empty: the trace has no op slices that do work (FLOPs)
-- columns:
--   phase, op, role
--   weights             the node's first source, type and shape (a matmul's weight matrix)
--   backend             the backend whose graph ran the node (CPU, BLAS, ...)
--   count               nodes it ran
--   total_ns, mean_ns   their time (first thread's start to the last thread's end)
--   gflop_per_s         FLOPs over that time
--   time_share          its part of the time of these weights in this phase, over backends
--   backends            how many backends ran these weights in this phase
--   wins                1 on the backend with the highest GFLOP/s for them (ties: the first
--                       by name)

INCLUDE PERFETTO MODULE profinfer.prelude.ops;

CREATE PERFETTO VIEW profinfer_backend_split AS
WITH per AS (
  SELECT phase, op, role, src0 AS weights, backend, COUNT(*) AS count, SUM(dur) AS total_ns,
         SUM(flops) AS flops
  FROM profinfer_node
  WHERE flops > 0
  GROUP BY phase, op, role, src0, backend
),
ranked AS (
  SELECT per.*,
         1.0 * flops / MAX(total_ns, 1) AS rate,
         SUM(total_ns) OVER w AS key_ns,
         COUNT(*) OVER w AS backends,
         ROW_NUMBER() OVER (PARTITION BY phase, op, role, weights
                            ORDER BY 1.0 * flops / MAX(total_ns, 1) DESC, backend) AS rank
  FROM per
  WINDOW w AS (PARTITION BY phase, op, role, weights)
)
SELECT phase, op, role, weights, backend, count, total_ns,
       CAST(ROUND(1.0 * total_ns / count) AS INTEGER) AS mean_ns,
       ROUND(rate, 3) AS gflop_per_s,
       ROUND(1.0 * total_ns / MAX(key_ns, 1), 4) AS time_share,
       backends,
       CASE WHEN rank = 1 THEN 1 ELSE 0 END AS wins
FROM ranked
ORDER BY phase DESC, key_ns DESC, op, role, weights, backend;
