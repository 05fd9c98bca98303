-- counters: perf counter counts per op type and role.
-- For the counters recorded in the trace (`record --counter`); an op's count is taken over
-- its work on one thread.
-- One row per (counter, op, role).
-- columns:
--   counter         the perf event (context-switches, task-clock, cycles, ...)
--   op, role
--   slices          op slices (thread shares) with a count
--   total, mean     the counter summed, and per slice
--   per_us          count per microsecond of op work
SELECT SUBSTR(a.key, LENGTH('debug.counter_') + 1) AS counter, o.op, o.role,
       COUNT(*) AS slices, SUM(a.int_value) AS total,
       ROUND(1.0 * SUM(a.int_value) / COUNT(*), 3) AS mean,
       ROUND(1000.0 * SUM(a.int_value) / MAX(SUM(o.dur), 1), 4) AS per_us
FROM profinfer_op o
JOIN args a ON a.arg_set_id = o.arg_set_id AND a.key GLOB 'debug.counter_*'
GROUP BY counter, o.op, o.role
ORDER BY counter, total DESC, o.op, o.role;
