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

INCLUDE PERFETTO MODULE profinfer.prelude.ops;

CREATE PERFETTO VIEW profinfer_op_cost AS
WITH inst AS (
  SELECT op, role, src0_dtype AS dtype, flops / 1e6 AS x, 1.0 * dur AS y, bytes
  FROM profinfer_node WHERE flops > 0
),
means AS (
  SELECT op, COUNT(*) AS n, AVG(x) AS mx, AVG(y) AS my
  FROM inst GROUP BY op HAVING COUNT(*) >= 2
),
sums AS (
  SELECT m.op, m.n, m.mx, m.my,
         SUM((i.x - m.mx) * (i.x - m.mx)) AS sxx, SUM((i.x - m.mx) * (i.y - m.my)) AS sxy,
         SUM((i.y - m.my) * (i.y - m.my)) AS syy
  FROM inst i JOIN means m USING (op)
  GROUP BY m.op
),
-- A line needs work that varies: below a relative variance of 1e-9 the op's work is taken as
-- constant, and its line is flat at the mean.
fit AS (
  SELECT op,
         CASE WHEN sxx > 1e-9 * n * mx * mx THEN sxy / sxx ELSE 0 END AS b,
         my - CASE WHEN sxx > 1e-9 * n * mx * mx THEN sxy / sxx ELSE 0 END * mx AS a,
         CASE WHEN sxx > 1e-9 * n * mx * mx AND syy > 0 THEN sxy * sxy / (sxx * syy) END AS r2
  FROM sums
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
ORDER BY g.op, mflop DESC, g.role, g.dtype;
