-- graph_summary: graphs per backend and phase, and how their threads spent the time.
-- columns:
--   backend, phase
--   graphs                   graphs computed
--   n_nodes, ops             mean nodes per graph (views included) and computed ops per graph
--   total_ns, mean_ns, p50_ns, max_ns   graph time (p50: nearest rank)
--   op_share, wait_share     thread time in ops and waiting (at barriers; a GPU backend's
--                            host in `wait for device`, within its ops too), over their sum: a
--                            GPU graph's ops are the host recording its commands, its waits
--                            the device's work

INCLUDE PERFETTO MODULE profinfer.prelude.nodes;
INCLUDE PERFETTO MODULE profinfer.prelude.ops;
INCLUDE PERFETTO MODULE profinfer.prelude.devices;

CREATE PERFETTO VIEW profinfer_graph_summary AS
WITH ops AS (
  SELECT graph, COUNT(DISTINCT node) AS ops, SUM(dur) AS work, SUM(wait) AS wait
  FROM profinfer_op GROUP BY graph
),
ranked AS (
  SELECT g.*, o.ops, o.work - COALESCE(d.op_wait, 0) AS work,
         COALESCE(o.wait, 0) + COALESCE(d.device_wait, 0) AS wait,
         ROW_NUMBER() OVER (PARTITION BY g.backend, g.phase ORDER BY g.dur) AS rn,
         COUNT(*) OVER (PARTITION BY g.backend, g.phase) AS n
  FROM profinfer_graph g LEFT JOIN ops o USING (graph)
  LEFT JOIN profinfer_device_graph d USING (graph)
)
SELECT backend, phase, COUNT(*) AS graphs,
       ROUND(AVG(n_nodes), 1) AS n_nodes, ROUND(AVG(COALESCE(ops, 0)), 1) AS ops,
       SUM(dur) AS total_ns, CAST(ROUND(AVG(dur)) AS INTEGER) AS mean_ns,
       MAX(CASE WHEN rn = (n + 1) / 2 THEN dur END) AS p50_ns, MAX(dur) AS max_ns,
       ROUND(1.0 * SUM(work) / MAX(SUM(work) + SUM(wait), 1), 4) AS op_share,
       ROUND(1.0 * SUM(wait) / MAX(SUM(work) + SUM(wait), 1), 4) AS wait_share
FROM ranked
GROUP BY backend, phase
ORDER BY backend, phase DESC;
