-- op_cost: op time against the FLOPs its shapes imply, as a fit per op and its outliers.
-- The paper: the time of a static matmul is proportional to its FLOPs. Per op, a least-squares
-- line ns = a + b * MFLOP
-- over all its instances; per (op, role, dtype), how far its mean lies from that line.
-- Ops with at least two instances and some FLOPs.
-- columns:
--   op, role
--   dtype               the type of its first source (the weights of a matmul)
--   count, mflop        instances and the work of one (million FLOPs)
--   mean_ns             mean instance time
--   gflop_per_s         achieved rate: mflop / mean_ns
--   gbyte_per_s         bytes read and written per second
--   fit_ns              the op's line at this mflop
--   residual            mean_ns / fit_ns - 1
--   outlier             1 when |residual| > 0.25
--   r2                  the op's fit quality
WITH inst AS (
  SELECT op, role, src0_dtype AS dtype, flops / 1e6 AS x, 1.0 * dur AS y, bytes
  FROM profinfer_node WHERE flops > 0
),
line AS (
  SELECT op, COUNT(*) AS n, SUM(x) AS sx, SUM(y) AS sy, SUM(x * x) AS sxx, SUM(x * y) AS sxy,
         SUM(y * y) AS syy
  FROM inst GROUP BY op HAVING COUNT(*) >= 2
),
coef AS (
  SELECT op,
         CASE WHEN n * sxx - sx * sx > 0 THEN (n * sxy - sx * sy) / (n * sxx - sx * sx)
              ELSE 0 END AS b,
         n, sx, sy, sxx, sxy, syy
  FROM line
),
fit AS (
  SELECT op, b, (sy - b * sx) / n AS a,
         CASE WHEN (n * sxx - sx * sx) > 0 AND (n * syy - sy * sy) > 0
              THEN (n * sxy - sx * sy) * (n * sxy - sx * sy)
                   / ((n * sxx - sx * sx) * (n * syy - sy * sy)) END AS r2
  FROM coef
),
groups AS (
  SELECT op, role, dtype, COUNT(*) AS count, AVG(x) AS x, AVG(y) AS y, AVG(bytes) AS bytes
  FROM inst GROUP BY op, role, dtype
)
SELECT g.op, g.role, g.dtype, g.count, ROUND(g.x, 3) AS mflop,
       CAST(ROUND(g.y) AS INTEGER) AS mean_ns,
       ROUND(g.x / g.y * 1e6, 3) AS gflop_per_s,
       ROUND(g.bytes / g.y, 3) AS gbyte_per_s,
       CAST(ROUND(f.a + f.b * g.x) AS INTEGER) AS fit_ns,
       CASE WHEN f.a + f.b * g.x > 0 THEN ROUND(g.y / (f.a + f.b * g.x) - 1, 3) END AS residual,
       CASE WHEN f.a + f.b * g.x > 0 AND ABS(g.y / (f.a + f.b * g.x) - 1) > 0.25 THEN 1 ELSE 0
       END AS outlier,
       ROUND(f.r2, 4) AS r2
FROM groups g JOIN fit f USING (op)
ORDER BY g.op, g.x DESC, g.role, g.dtype;
