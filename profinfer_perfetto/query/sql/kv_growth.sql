-- kv_growth: attention op time against KV cache length, fitted per layer and overall.
-- The paper: KV growth drives the dynamic ops KQ and KQV (FLASH_ATTN_EXT where fused).
-- Decode steps only; x = KV length after the step (pos + n_tokens), y = op instance time.
-- One row per (op, role) over all layers (layer empty), then per (op, role, layer).
-- columns:
--   op, role, layer
--   points            op instances fitted
--   kv_min, kv_max    KV lengths covered
--   slope_ns_per_token, intercept_ns   least-squares line y = intercept + slope * x
--   r2                fit quality (1 = perfect; empty when x or y is constant)
WITH points AS (
  SELECT n.op, n.role, n.layer, 1.0 * s.kv_len AS x, 1.0 * n.dur AS y
  FROM profinfer_node n JOIN profinfer_step s USING (step)
  WHERE n.phase = 'decode'
    AND (n.op IN ('FLASH_ATTN_EXT', 'SOFT_MAX')
         OR n.role IN ('kq', 'kqv', 'kq_soft_max', 'kq_mask'))
),
sums AS (
  SELECT op, role, NULL AS layer, COUNT(*) AS n, SUM(x) AS sx, SUM(y) AS sy,
         SUM(x * x) AS sxx, SUM(x * y) AS sxy, SUM(y * y) AS syy, MIN(x) AS lo, MAX(x) AS hi
  FROM points GROUP BY op, role
  UNION ALL
  SELECT op, role, layer, COUNT(*), SUM(x), SUM(y), SUM(x * x), SUM(x * y), SUM(y * y),
         MIN(x), MAX(x)
  FROM points GROUP BY op, role, layer
),
fit AS (
  SELECT *, n * sxx - sx * sx AS vx, n * syy - sy * sy AS vy, n * sxy - sx * sy AS cxy
  FROM sums
)
SELECT op, role, layer, n AS points, CAST(lo AS INTEGER) AS kv_min, CAST(hi AS INTEGER) AS kv_max,
       CASE WHEN vx > 0 THEN ROUND(cxy / vx, 3) END AS slope_ns_per_token,
       CASE WHEN vx > 0 THEN ROUND((sy - (cxy / vx) * sx) / n, 1) END AS intercept_ns,
       CASE WHEN vx > 0 AND vy > 0 THEN ROUND(cxy * cxy / (vx * vy), 4) END AS r2
FROM fit
ORDER BY op, role, layer IS NOT NULL, layer;
