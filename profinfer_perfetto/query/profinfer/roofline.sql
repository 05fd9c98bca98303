-- roofline: each op under this machine's roofs: memory-bound, compute-bound or overhead-bound.
-- The roofs are those `profinfer-perfetto calibrate` measured on the machine the trace was
-- recorded on (record writes them into the trace): memory bandwidth and ggml's matmul FLOP/s
-- per weight type, at the thread count of the op's graph (else the most threads measured below
-- it, else the fewest above). Per (phase, op, role, weight type, threads), over the nodes with
-- work: arithmetic intensity = FLOPs / bytes (both from the op's shapes: no PMU counts them
-- here), achieved rates, the roof at that intensity = min(compute peak, intensity x memory
-- peak), and the verdict: overhead-bound when the op reaches under a tenth of that roof (far
-- below both), else memory-bound when its intensity is below the ridge (compute peak / memory
-- peak), else compute-bound. An op whose weight type was not calibrated is held against the
-- highest compute peak measured (roof_dtype says which). The roofs are the CPU's: a GPU
-- backend's nodes (graphs whose host submits to a device, e.g. Vulkan0) are left out, their
-- rates are backend_split's (device time with --gpu-timestamps); a device roof would need
-- `calibrate` on the device, which is not measured (Mesa's software GPU here has no roof of
-- its own: it runs on these CPUs).
-- when empty: the trace holds no roofs: calibrate (--llama-bench, --model), then record again
-- columns:
--   phase, op, role
--   dtype               the type of its first source (a matmul's weights)
--   threads             its graph's threads
--   instances           nodes
--   intensity           FLOPs per byte
--   gflop_per_s         achieved: its FLOPs over its node time
--   gbyte_per_s         achieved: its bytes over its node time
--   bytes_from          where its bytes come from (shapes)
--   peak_gbyte_per_s    the memory roof
--   peak_gflop_per_s    the compute roof
--   roof_dtype          the weight type the compute roof was measured with
--   ridge               the intensity where the roofs meet
--   roof_gflop_per_s    the roof at its intensity
--   roof_share          achieved / roof
--   verdict             memory-bound, compute-bound or overhead-bound

INCLUDE PERFETTO MODULE profinfer.prelude.nodes;
INCLUDE PERFETTO MODULE profinfer.prelude.ops;
INCLUDE PERFETTO MODULE profinfer.prelude.peak;
INCLUDE PERFETTO MODULE profinfer.prelude.devices;

CREATE PERFETTO VIEW profinfer_roofline AS
WITH groups AS (
  SELECT ROW_NUMBER() OVER (ORDER BY n.phase, n.op, n.role, n.src0_dtype, g.n_threads) AS gid,
         n.phase, n.op, n.role, n.src0_dtype AS dtype, g.n_threads AS threads,
         COUNT(*) AS instances, SUM(n.flops) AS flops, SUM(n.bytes) AS bytes, SUM(n.dur) AS dur
  FROM profinfer_node n JOIN profinfer_graph g USING (graph)
  WHERE n.flops > 0 AND n.bytes > 0 AND n.dur > 0
    AND n.graph NOT IN (SELECT graph FROM profinfer_device_graph)
  GROUP BY n.phase, n.op, n.role, n.src0_dtype, g.n_threads
),
-- Each group's candidate roofs, ranked: the op's own weight type first (compute), then the most
-- threads up to the group's, then the fewest above, then the highest value.
ranked AS (
  SELECT g.gid, p.kind, p.dtype, p.value,
         ROW_NUMBER() OVER (
           PARTITION BY g.gid, p.kind
           ORDER BY p.kind = 'compute' AND p.dtype = COALESCE(g.dtype, '') DESC,
                    p.threads > g.threads,
                    CASE WHEN p.threads <= g.threads THEN -p.threads ELSE p.threads END,
                    p.value DESC) AS pick
  FROM groups g JOIN profinfer_peak p
),
rated AS (
  SELECT g.*, m.value AS peak_gb, c.value AS peak_gflop, c.dtype AS roof_dtype,
         1.0 * g.flops / g.bytes AS ai, 1.0 * g.flops / g.dur AS achieved,
         MIN(c.value, 1.0 * g.flops / g.bytes * m.value) AS roof
  FROM groups g
  JOIN ranked m ON m.gid = g.gid AND m.kind = 'memory' AND m.pick = 1
  JOIN ranked c ON c.gid = g.gid AND c.kind = 'compute' AND c.pick = 1
)
SELECT phase, op, role, dtype, threads, instances, ROUND(ai + 1e-9, 3) AS intensity,
       ROUND(achieved + 1e-9, 3) AS gflop_per_s, ROUND(1.0 * bytes / dur + 1e-9, 3) AS gbyte_per_s,
       'shapes' AS bytes_from, peak_gb AS peak_gbyte_per_s, peak_gflop AS peak_gflop_per_s,
       roof_dtype, ROUND(peak_gflop / peak_gb + 1e-9, 3) AS ridge,
       ROUND(roof + 1e-9, 3) AS roof_gflop_per_s, ROUND(achieved / roof + 1e-9, 3) AS roof_share,
       CASE WHEN achieved < 0.1 * roof THEN 'overhead-bound'
            WHEN ai < peak_gflop / peak_gb THEN 'memory-bound'
            ELSE 'compute-bound' END AS verdict
FROM rated
ORDER BY phase, op, role, dtype, threads;
-- Rates are positive: each is nudged by far less than its last digit before rounding, so that a
-- decimal tie (x.xxx5) rounds the same way on both engines, whose SQLite builds differ there.
