-- backend_split: per op and weights, the time each backend took, its copies, and which one wins.
-- ProfTime's offloading and ProfStat's across-backends view: with a second backend in the build
-- (BLAS, Vulkan), llama.cpp's scheduler gives it the ops it takes and the CPU backend keeps the
-- rest. Per (phase, op, role, weights) and backend: the nodes it ran, their time and the rate
-- they achieved. A GPU backend's (one whose host submits to a device) time is its device
-- time where the trace has it (record --gpu-timestamps: the device track's slices), else the
-- host's recording of its commands, which is no time of the op: such rows say so (time_from)
-- and never win. The copies between host and device within the token steps that ran a GPU
-- graph are charged to that graph's backend: within a phase, shared over its rows by their
-- time. Within a (phase, op, role, weights) the backends are compared by GFLOP/s over their
-- time and copies (the work per second; in one run they see different batch sizes, e.g.
-- `llama-bench -ub 16,64` gives the same prompt to the CPU and to BLAS). Across runs (a run at
-- -ngl 0 and one at -ngl 99: `query 'runs/*.pftrace' backend_split`) each trace's rows show
-- the same (op, weights) on its backend: wins is within one trace, gflop_per_s compares them.
-- when empty: the trace has no op slices that do work (FLOPs)
-- columns:
--   phase, op, role
--   weights             the node's first source, type and shape (a matmul's weight matrix)
--   backend             the backend whose graph ran the node (CPU, BLAS, Vulkan0, ...)
--   time_from           host (the host computed it), device (a GPU's timestamps) or
--                       host recording (a GPU backend's host side only: not comparable)
--   count               nodes it ran (with device time: the device's timed ops)
--   total_ns, mean_ns   their time (host: first thread's start to the last thread's end)
--   gflop_per_s         FLOPs over that time
--   copy_ns, copy_bytes its share of its backend's copies in the phase (0 without copies)
--   time_share          its part of the time of these weights in this phase, over backends
--   backends            how many backends ran these weights in this phase
--   wins                1 on the comparable backend with the highest GFLOP/s over its time and
--                       copies (ties: the first by name)

INCLUDE PERFETTO MODULE profinfer.prelude.ops;
INCLUDE PERFETTO MODULE profinfer.prelude.devices;

CREATE PERFETTO VIEW profinfer_backend_split AS
WITH timed AS (
  SELECT 'host' AS clock, phase, op, role, src0, backend, dur, flops FROM profinfer_node
  UNION ALL
  SELECT 'device', phase, op, role, src0, backend, dur, flops FROM profinfer_device_op
),
grouped AS (
  SELECT clock, phase, op, role, src0 AS weights, backend, COUNT(*) AS count,
         SUM(dur) AS total_ns, SUM(flops) AS flops
  FROM timed
  WHERE flops > 0
  GROUP BY clock, phase, op, role, src0, backend
),
host AS (SELECT * FROM grouped WHERE clock = 'host'),
device AS (SELECT * FROM grouped WHERE clock = 'device'),
per AS (
  SELECT h.phase, h.op, h.role, h.weights, h.backend,
         CASE WHEN d.count IS NOT NULL THEN 'device'
              WHEN h.backend IN (SELECT g.backend FROM profinfer_graph g
                                 JOIN profinfer_device_graph USING (graph))
                THEN 'host recording'
              ELSE 'host' END AS time_from,
         COALESCE(d.count, h.count) AS count, COALESCE(d.total_ns, h.total_ns) AS total_ns,
         COALESCE(d.flops, h.flops) AS flops
  FROM host h LEFT JOIN device d USING (phase, op, role, weights, backend)
),
copies AS (
  SELECT phase, backend, SUM(dur) AS ns, SUM(bytes) AS bytes
  FROM profinfer_copy GROUP BY phase, backend
),
charged AS (
  SELECT per.*,
         COALESCE(1.0 * c.ns * total_ns / SUM(total_ns) OVER b, 0) AS copy_ns,
         COALESCE(1.0 * c.bytes * total_ns / SUM(total_ns) OVER b, 0) AS copy_bytes
  FROM per LEFT JOIN copies c USING (phase, backend)
  WINDOW b AS (PARTITION BY phase, backend)
),
ranked AS (
  SELECT charged.*,
         1.0 * flops / MAX(total_ns, 1) AS rate,
         SUM(total_ns) OVER w AS key_ns,
         COUNT(*) OVER w AS backends,
         ROW_NUMBER() OVER (PARTITION BY phase, op, role, weights
                            ORDER BY time_from = 'host recording',
                                     1.0 * flops / MAX(total_ns + copy_ns, 1) DESC,
                                     backend) AS rank
  FROM charged
  WINDOW w AS (PARTITION BY phase, op, role, weights)
)
SELECT phase, op, role, weights, backend, time_from, count, total_ns,
       CAST(ROUND(1.0 * total_ns / count) AS INTEGER) AS mean_ns,
       ROUND(rate, 3) AS gflop_per_s,
       CAST(ROUND(copy_ns) AS INTEGER) AS copy_ns, CAST(ROUND(copy_bytes) AS INTEGER) AS copy_bytes,
       ROUND(1.0 * total_ns / MAX(key_ns, 1), 4) AS time_share,
       backends,
       CASE WHEN rank = 1 AND time_from != 'host recording' THEN 1 ELSE 0 END AS wins
FROM ranked
ORDER BY phase DESC, key_ns DESC, op, role, weights, backend;
