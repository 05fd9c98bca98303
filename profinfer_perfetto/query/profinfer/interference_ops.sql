-- interference_ops: per op class, how long its threads waited for a CPU inside it (--sched).
-- The runnable-but-not-running time inside each thread's share of the op's work: which ops
-- interference lands on.
-- when empty: no scheduling data in this trace (record it with --sched)
-- One row per (phase, op).
-- columns:
--   phase, op
--   count          op slices (one thread's share of a node each)
--   work_ns        their summed work time
--   waiting_ns     runnable-not-running time inside that work
--   share          waiting_ns over work_ns

INCLUDE PERFETTO MODULE profinfer.prelude.ops;
INCLUDE PERFETTO MODULE profinfer.prelude.sched;

CREATE PERFETTO VIEW profinfer_interference_ops AS
WITH span AS (
  SELECT o.tid, o.ts, o.dur, o.graph, o.node FROM profinfer_op_times o
),
longest AS (SELECT MAX(dur) AS dur FROM span),
hit AS (
  SELECT s.graph, s.node, SUM(MIN(s.ts + s.dur, r.ts + r.dur) - MAX(s.ts, r.ts)) AS ns
  FROM profinfer_runnable r JOIN span s
    ON s.tid = r.tid AND s.ts < r.ts + r.dur AND s.ts + s.dur > r.ts
   AND s.ts >= r.ts - (SELECT dur FROM longest)
  GROUP BY s.graph, s.node
)
SELECT n.phase, n.op, SUM(n.threads) AS count, SUM(n.work) AS work_ns,
       COALESCE(SUM(h.ns), 0) AS waiting_ns,
       ROUND(1.0 * COALESCE(SUM(h.ns), 0) / MAX(SUM(n.work), 1), 4) AS share
FROM profinfer_node n
LEFT JOIN hit h USING (graph, node)
WHERE n.phase IS NOT NULL AND EXISTS (SELECT 1 FROM sched)
GROUP BY n.phase, n.op
ORDER BY n.phase DESC, waiting_ns DESC, n.op;
