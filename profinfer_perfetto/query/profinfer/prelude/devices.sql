-- prelude.devices: a GPU backend's graphs, its ops' device times and the host-device copies.
--
--   profinfer_device_graph  one row per graph whose host submitted work to a device or waited
--                    for it (a GPU backend's, e.g. Vulkan0; the calls lie below its graph
--                    slice or its op slices): graph, device_wait (its `wait for device`
--                    slices' time), op_wait (the part of it inside its op slices)
--   profinfer_device_op  one row per slice of a device's track (record --gpu-timestamps, args
--                    with `device_time`): graph (the GPU graph whose time holds it), step,
--                    phase, backend, op, role, src0, flops, bytes, ts, dur (device time)
--   profinfer_copy   one row per copy slice (`copy to device`, `copy from device`, `copy
--                    async`) within a token step that ran a GPU graph: step, phase, backend
--                    (that graph's: the backend that needed the copy), ts, dur, bytes, direction

INCLUDE PERFETTO MODULE profinfer.prelude.ops;

CREATE TABLE profinfer_device_graph AS
WITH calls AS (SELECT parent_id, name, dur FROM slice WHERE name IN ('submit', 'wait for device')),
held AS (
  SELECT gs.graph, c.name, c.dur, 0 AS in_op
  FROM calls c JOIN profinfer_graph_slice gs ON gs.slice_id = c.parent_id
  UNION ALL
  SELECT o.graph, c.name, c.dur, 1 AS in_op
  FROM calls c JOIN profinfer_op_times o ON o.slice_id = c.parent_id
)
SELECT graph, SUM(CASE WHEN name = 'wait for device' THEN dur ELSE 0 END) AS device_wait,
       SUM(CASE WHEN name = 'wait for device' THEN dur * in_op ELSE 0 END) AS op_wait
FROM held
GROUP BY graph;
CREATE UNIQUE INDEX profinfer_device_graph_id ON profinfer_device_graph (graph);

CREATE TABLE profinfer_device_op AS
SELECT g.graph, g.step, g.phase, g.backend, a.op, a.role, a.src0, a.flops, a.bytes, d.ts, d.dur
FROM (SELECT ts, dur, arg_set_id FROM slice WHERE +arg_set_id IN
        (SELECT arg_set_id FROM profinfer_slice_args WHERE device_time IS NOT NULL)) d
JOIN profinfer_slice_args a USING (arg_set_id)
JOIN (SELECT * FROM profinfer_graph WHERE graph IN (SELECT graph FROM profinfer_device_graph)) g
  ON d.ts >= g.ts AND d.ts + d.dur <= g.ts + g.dur;

CREATE TABLE profinfer_copy AS
SELECT st.step, st.phase, b.backend, c.ts, c.dur, a.copy_bytes AS bytes, a.direction
FROM (SELECT ts, dur, arg_set_id FROM slice WHERE +arg_set_id IN
        (SELECT arg_set_id FROM profinfer_slice_args WHERE direction IS NOT NULL)) c
JOIN profinfer_slice_args a USING (arg_set_id)
JOIN profinfer_step st ON c.ts >= st.ts AND c.ts < st.ts + st.dur
JOIN (SELECT g.step, MIN(g.backend) AS backend
      FROM profinfer_graph g JOIN profinfer_device_graph USING (graph)
      GROUP BY g.step) b ON b.step = st.step;
