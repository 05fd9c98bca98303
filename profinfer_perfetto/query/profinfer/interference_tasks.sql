-- interference_tasks: who ran on the target's CPUs while it wanted them (--sched).
-- While a step runs, llama.cpp's threads want every CPU they run on (they spin at barriers);
-- between steps, an inference thread that waits for a CPU (the main thread sampling, a worker
-- polling for the next graph) wants one too. Another task's run time on the target's CPUs at
-- such times (profinfer_contended) is time taken from the target. Not seen: a launched
-- target's wait just after it is resumed, where its CPU has no switch recorded yet
-- (trace_processor drops a wakeup on such a CPU, and the built-in engine does the same).
-- when empty: no other task ran on the target's CPUs during its steps, or no scheduling data
-- in this trace (record it with --sched)
-- One row per task, the one that took most first.
-- columns:
--   pid, process, tid, thread
--   taken_ns   its run time on the target's CPUs while the target wanted them
--   steps      token steps it ran in
--   cpus       the CPUs it took time on

INCLUDE PERFETTO MODULE profinfer.prelude.steps;
INCLUDE PERFETTO MODULE profinfer.prelude.sched;

CREATE PERFETTO VIEW profinfer_interference_tasks AS
WITH taken AS (
  SELECT o.utid, o.cpu, MIN(o.ts + o.dur, c.ts + c.dur) - MAX(o.ts, c.ts) AS ns
  FROM profinfer_contended c JOIN profinfer_other_run o
    ON o.ts < c.ts + c.dur AND o.ts + o.dur > c.ts
),
steps AS (
  SELECT o.utid, COUNT(DISTINCT st.step) AS steps
  FROM profinfer_step st JOIN profinfer_other_run o
    ON o.ts < st.ts + st.dur AND o.ts + o.dur > st.ts
  GROUP BY o.utid
)
SELECT t.pid, t.process, t.tid, t.thread, d.taken AS taken_ns, COALESCE(s.steps, 0) AS steps,
       c.cpus
FROM (SELECT utid, SUM(ns) AS taken FROM taken GROUP BY utid) d
JOIN (SELECT DISTINCT utid, tid, thread, pid, process FROM profinfer_other_run) t USING (utid)
JOIN (SELECT utid, GROUP_CONCAT(cpu, ',') AS cpus
      FROM (SELECT DISTINCT utid, cpu FROM taken ORDER BY utid, cpu) GROUP BY utid) c
  USING (utid)
LEFT JOIN steps s USING (utid)
ORDER BY taken_ns DESC, t.tid;
