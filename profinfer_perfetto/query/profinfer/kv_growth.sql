-- kv_growth: attention op time against KV cache length, fitted per layer and overall.
-- The paper: KV growth drives the dynamic ops KQ and KQV (FLASH_ATTN_EXT where fused).
-- Decode steps of one sequence only; x = KV length after the step (pos + n_tokens, the position
-- from the batch, or counted from the start of a launched run; unknown, and left out, for a
-- --pid capture of a batch without positions), y = op instance time (profinfer_kv_point).
-- One row per (op, role) over all layers (layer empty), then per (op, role, layer).
-- columns:
--   op, role, layer
--   points            op instances fitted
--   kv_min, kv_max    KV lengths covered
--   slope_ns_per_token, intercept_ns   least-squares line y = intercept + slope * x
--   r2                fit quality (1 = perfect; empty when x or y is constant)

INCLUDE PERFETTO MODULE profinfer.prelude.ops;

CREATE PERFETTO VIEW profinfer_kv_growth AS
WITH points AS (SELECT op, role, layer, kv_len AS x, dur AS y FROM profinfer_kv_point),
-- Each point twice: in its layer's group and in the all-layers group (layer -2 stands for
-- "all" until the output, where it shows as empty).
grouped AS (
  SELECT op, role, layer AS grp, x, y FROM points
  UNION ALL
  SELECT op, role, -2, x, y FROM points
),
means AS (
  SELECT op, role, grp, COUNT(*) AS n, AVG(x) AS mx, AVG(y) AS my, MIN(x) AS lo, MAX(x) AS hi
  FROM grouped GROUP BY op, role, grp
),
fit AS (
  SELECT m.op, m.role, m.grp, m.n, m.mx, m.my, m.lo, m.hi,
         SUM((g.x - m.mx) * (g.x - m.mx)) AS sxx, SUM((g.x - m.mx) * (g.y - m.my)) AS sxy,
         SUM((g.y - m.my) * (g.y - m.my)) AS syy
  FROM grouped g JOIN means m USING (op, role, grp)
  GROUP BY m.op, m.role, m.grp
)
SELECT op, role, CASE WHEN grp = -2 THEN NULL ELSE grp END AS layer, n AS points,
       CAST(lo AS INTEGER) AS kv_min, CAST(hi AS INTEGER) AS kv_max,
       CASE WHEN sxx > 0 THEN ROUND(sxy / sxx + 1e-9, 3) END AS slope_ns_per_token,
       CASE WHEN sxx > 0 THEN ROUND(my - sxy / sxx * mx + 1e-7, 1) END AS intercept_ns,
       CASE WHEN sxx > 0 AND syy > 0 THEN ROUND(sxy * sxy / (sxx * syy), 4) END AS r2
FROM fit
ORDER BY op, role, grp <> -2, grp;
-- The fit's sums run in each engine's own order: a value that is a tie in decimal (x.x5) lands
-- a rounding error either side of it, so the fit is nudged by far less than its last digit
-- before rounding, which makes both engines round the tie the same way.
