-- prelude.peak: the roofs `calibrate` measured, as `record` wrote them into the trace.
--
--   profinfer_peak   one row per roof of the machine the trace was recorded on (`calibrate`):
--                    kind (memory: GB/s; compute: GFLOP/s of matmuls with weights of dtype),
--                    dtype, threads, value

INCLUDE PERFETTO MODULE profinfer.prelude.steps;

CREATE TABLE profinfer_peak AS
SELECT a.peak_kind AS kind, COALESCE(a.peak_dtype, '') AS dtype, a.peak_threads AS threads,
       a.peak_value AS value
FROM (SELECT arg_set_id FROM slice WHERE name = 'peak') s
JOIN profinfer_slice_args a USING (arg_set_id);
