-- moe_experts: which experts a Mixture-of-Experts model activates, per layer, and how often again.
-- From the expert ids each MUL_MAT_ID / ADD_ID op read (the op slice's `experts` arg; one op per
-- layer and graph counts, the layer's other expert ops route the same ids). A token's distance
-- since an expert's last activation counts the tokens the run processed in between (in batch
-- order), in the same layer; its phase is the later activation's. Prefill and decode apart. A
-- layer that routes fewer tokens than its step has (the last layer computes only the tokens
-- whose output is wanted) routes the step's last ones.
-- when empty: no Mixture-of-Experts routing in this trace (a dense model)
-- columns:
--   phase, layer, expert
--   activations     tokens routed to the expert
--   token_share     activations over the tokens the layer routed in the phase
--   layer_balance   the layer's busiest expert over its mean expert (1 = even), in the phase
--   layer_cv        coefficient of variation of the layer's activations over its experts
--   dist_mean, dist_p50, dist_p90   tokens since the expert's last activation in the layer
--                   (nearest rank; empty for its first activation)

INCLUDE PERFETTO MODULE profinfer.prelude.moe;

CREATE PERFETTO VIEW profinfer_moe_experts AS
WITH
first_op AS (  -- the layer's expert ops route the same ids: one of them counts
  SELECT graph, layer, MIN(node) AS node FROM profinfer_route GROUP BY graph, layer
),
activation AS (
  SELECT r.phase, r.layer, r.expert, r.at,
         r.at - LAG(r.at) OVER (PARTITION BY r.layer, r.expert ORDER BY r.at) AS dist
  FROM profinfer_route r JOIN first_op USING (graph, layer, node)
),
routed AS (
  SELECT phase, layer, COUNT(DISTINCT at) AS tokens FROM activation GROUP BY phase, layer
),
per_expert AS (
  SELECT phase, layer, expert, COUNT(*) AS activations, AVG(dist) AS dist_mean
  FROM activation GROUP BY phase, layer, expert
),
balance AS (
  SELECT phase, layer, MAX(activations) / AVG(activations) AS max_over_mean,
         SQRT(MAX(AVG(activations * activations) - AVG(activations) * AVG(activations), 0))
           / AVG(activations) AS cv
  FROM per_expert GROUP BY phase, layer
),
ranked AS (
  SELECT phase, layer, expert, dist,
         ROW_NUMBER() OVER (PARTITION BY phase, layer, expert ORDER BY dist) AS rn,
         COUNT(*) OVER (PARTITION BY phase, layer, expert) AS n
  FROM activation WHERE dist IS NOT NULL
),
percentiles AS (
  SELECT phase, layer, expert,
         MAX(CASE WHEN rn = (n + 1) / 2 THEN dist END) AS dist_p50,
         MAX(CASE WHEN rn = (9 * n + 9) / 10 THEN dist END) AS dist_p90
  FROM ranked GROUP BY phase, layer, expert
)
SELECT e.phase, e.layer, e.expert, e.activations,
       ROUND(1.0 * e.activations / r.tokens, 4) AS token_share,
       ROUND(b.max_over_mean, 3) AS layer_balance, ROUND(b.cv, 3) AS layer_cv,
       ROUND(e.dist_mean, 2) AS dist_mean, p.dist_p50, p.dist_p90
FROM per_expert e
JOIN routed r USING (phase, layer)
JOIN balance b USING (phase, layer)
LEFT JOIN percentiles p USING (phase, layer, expert)
ORDER BY e.phase DESC, e.layer, e.expert;
