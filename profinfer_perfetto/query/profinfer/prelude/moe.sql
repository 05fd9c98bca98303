-- prelude.moe: the experts each Mixture-of-Experts op routed each token to.
--
--   profinfer_route  one row per (MoE op execution, token, expert): graph, node, step, phase,
--                    layer, token, at (the token's place in the run), expert

INCLUDE PERFETTO MODULE profinfer.prelude.nodes;

-- One row per (Mixture-of-Experts op execution, token, expert chosen), split from the op's
-- `experts` arg: token is its row in the op's ids, at its place in the run's processing order
-- (tokens of earlier steps first; an op that routes fewer tokens than its step has, like the
-- last layer's, routes the step's last ones).
CREATE TABLE profinfer_route AS
WITH RECURSIVE
moe AS (
  SELECT n.graph, n.node, g.step, g.phase, a.layer, a.experts, a.routed_tokens
  FROM profinfer_node_times n
  JOIN profinfer_slice_args a ON a.arg_set_id = n.node_args
  JOIN profinfer_graph g USING (graph)
  WHERE a.experts IS NOT NULL AND g.phase IS NOT NULL
),
base AS (
  SELECT step, n_tokens, SUM(n_tokens) OVER (ORDER BY step) - n_tokens AS first_token
  FROM profinfer_step
),
token (graph, node, step, phase, layer, first, idx, ids, rest) AS (
  SELECT m.graph, m.node, m.step, m.phase, m.layer,
         b.first_token + MAX(b.n_tokens - m.routed_tokens, 0), -1, '', m.experts || ' '
  FROM moe m JOIN base b USING (step)
  UNION ALL
  SELECT graph, node, step, phase, layer, first, idx + 1, SUBSTR(rest, 1, INSTR(rest, ' ') - 1),
         SUBSTR(rest, INSTR(rest, ' ') + 1)
  FROM token WHERE rest <> ''
),
pick (graph, node, step, phase, layer, token, at, expert, rest) AS (
  SELECT graph, node, step, phase, layer, idx, first + idx, '', ids || ','
  FROM token WHERE idx >= 0
  UNION ALL
  SELECT graph, node, step, phase, layer, token, at, SUBSTR(rest, 1, INSTR(rest, ',') - 1),
         SUBSTR(rest, INSTR(rest, ',') + 1)
  FROM pick WHERE rest <> ''
)
SELECT graph, node, step, phase, layer, token, at, CAST(expert AS INTEGER) AS expert
FROM pick WHERE expert <> '';
