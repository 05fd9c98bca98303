-- counters: perf counter counts per op type and role.
-- For the counters recorded in the trace (`record --counter`); an op's count is taken over
-- its work on one thread.
-- An op slice carries a counter's count where it is not 0 (most ops see no context switch).
-- One row per (counter, op, role) that counted anything.
-- columns:
--   counter         the perf event (context-switches, task-clock, cycles, ...)
--   op, role
--   slices          op slices (thread shares) of that op and role
--   total, mean     the counter summed, and per slice
--   per_us          count per microsecond of op work

INCLUDE PERFETTO MODULE profinfer.prelude.ops;

CREATE PERFETTO VIEW profinfer_counters AS
WITH counted AS (
  SELECT SUBSTR(a.key, LENGTH('debug.counter_') + 1) AS counter, o.op, o.role,
         SUM(a.int_value) AS total
  FROM profinfer_op o
  JOIN args a ON a.arg_set_id = o.arg_set_id AND a.key GLOB 'debug.counter_*'
  GROUP BY counter, o.op, o.role
),
ops AS (SELECT op, role, COUNT(*) AS slices, SUM(dur) AS work FROM profinfer_op GROUP BY op, role)
SELECT c.counter, c.op, c.role, o.slices, c.total,
       ROUND(1.0 * c.total / o.slices, 3) AS mean,
       ROUND(1000.0 * c.total / MAX(o.work, 1), 4) AS per_us
FROM counted c JOIN ops o USING (op, role)
ORDER BY c.counter, c.total DESC, c.op, c.role;
