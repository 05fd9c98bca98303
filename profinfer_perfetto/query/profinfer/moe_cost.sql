-- moe_cost: Mixture-of-Experts op time against the experts and tokens it routes.
-- A MUL_MAT_ID multiplies each token by the weights of the experts it chose: its time grows
-- with the distinct experts the batch touched (each one's weights read once) and the tokens.
-- when empty: no Mixture-of-Experts routing in this trace (a dense model)
-- One row per (phase, op, role, distinct experts).
-- columns:
--   phase, op, role
--   experts         distinct experts the op's tokens were routed to
--   count           op instances (graph nodes)
--   mean_tokens     tokens routed, on average
--   mean_ns         instance time (first thread's start to last thread's end)
--   ns_per_expert   mean_ns over experts

INCLUDE PERFETTO MODULE profinfer.prelude.ops;
INCLUDE PERFETTO MODULE profinfer.prelude.moe;

CREATE PERFETTO VIEW profinfer_moe_cost AS
WITH per_node AS (
  SELECT graph, node, phase, COUNT(DISTINCT expert) AS experts, COUNT(DISTINCT token) AS tokens
  FROM profinfer_route GROUP BY graph, node
)
SELECT p.phase, n.op, n.role, p.experts, COUNT(*) AS count,
       ROUND(AVG(p.tokens), 1) AS mean_tokens,
       CAST(ROUND(AVG(n.dur)) AS INTEGER) AS mean_ns,
       CAST(ROUND(AVG(n.dur) / p.experts) AS INTEGER) AS ns_per_expert
FROM per_node p JOIN profinfer_node n USING (graph, node)
GROUP BY p.phase, n.op, n.role, p.experts
ORDER BY p.phase DESC, n.op, n.role, p.experts;
