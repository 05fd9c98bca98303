-- interference_tasks: who ran on the target's CPUs during its token steps (--sched).
-- While a step runs, llama.cpp's threads want every CPU they run on (they spin at barriers),
-- so another task's run time there during a step is time taken from the target.
-- when empty: no other task ran on the target's CPUs during its steps, or no scheduling data
-- in this trace (record it with --sched)
-- One row per task, the one that took most first.
-- columns:
--   pid, process, tid, thread
--   taken_ns   its run time on the target's CPUs during token steps
--   steps      token steps it ran in
--   cpus       the CPUs it ran on then
WITH during AS (
  SELECT o.utid, o.cpu, st.step, MIN(o.ts + o.dur, st.ts + st.dur) - MAX(o.ts, st.ts) AS ns
  FROM profinfer_step st JOIN profinfer_other_run o
    ON o.ts < st.ts + st.dur AND o.ts + o.dur > st.ts
)
SELECT t.pid, t.process, t.tid, t.thread, d.taken AS taken_ns, d.steps, c.cpus
FROM (SELECT utid, SUM(ns) AS taken, COUNT(DISTINCT step) AS steps FROM during GROUP BY utid) d
JOIN (SELECT DISTINCT utid, tid, thread, pid, process FROM profinfer_other_run) t USING (utid)
JOIN (SELECT utid, GROUP_CONCAT(cpu, ',') AS cpus
      FROM (SELECT DISTINCT utid, cpu FROM during ORDER BY utid, cpu) GROUP BY utid) c
  USING (utid)
ORDER BY taken_ns DESC, t.tid;
