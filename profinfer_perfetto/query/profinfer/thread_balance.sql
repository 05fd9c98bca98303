-- thread_balance: ops whose threads finish far apart (the fast ones wait at the barrier).
-- One row per (op, role) over its instances run by more than one thread, most unbalanced first.
-- columns:
--   op, role
--   instances, threads       graph nodes and threads per node
--   mean_work_ns             mean work of one thread's share
--   mean_spread_ns           mean (slowest share - fastest share) per instance
--   imbalance                summed slowest shares over summed fastest shares
--   wait_share               barrier wait over work + wait, summed over threads
--   worst_graph, worst_spread_ns   the instance with the largest spread

INCLUDE PERFETTO MODULE profinfer.prelude.ops;

CREATE PERFETTO VIEW profinfer_thread_balance AS
WITH per AS (
  SELECT op, role, graph, threads, work, slowest, fastest, wait,
         slowest - fastest AS spread,
         ROW_NUMBER() OVER (PARTITION BY op, role ORDER BY slowest - fastest DESC, graph)
           AS worst
  FROM profinfer_node WHERE threads > 1
)
SELECT op, role, COUNT(*) AS instances, MAX(threads) AS threads,
       CAST(ROUND(1.0 * SUM(work) / SUM(threads)) AS INTEGER) AS mean_work_ns,
       CAST(ROUND(AVG(spread)) AS INTEGER) AS mean_spread_ns,
       ROUND(1.0 * SUM(slowest) / MAX(SUM(fastest), 1), 3) AS imbalance,
       ROUND(1.0 * SUM(wait) / MAX(SUM(work) + SUM(wait), 1), 4) AS wait_share,
       MAX(CASE WHEN worst = 1 THEN graph END) AS worst_graph,
       MAX(CASE WHEN worst = 1 THEN spread END) AS worst_spread_ns
FROM per
GROUP BY op, role
ORDER BY mean_spread_ns DESC, op, role;
