-- interference: per token step, how long the inference threads waited for a CPU (--sched).
-- A thread waits when it is runnable but not running: preempted, or woken and not yet on a CPU.
-- With llama.cpp's barriers a step cannot pass the op a waiting thread holds, so `stalled`
-- (time in which at least one inference thread waited for a CPU) is the part of the step's
-- latency that interference accounts for. Who ran instead: interference_tasks; which ops
-- waited: interference_ops.
-- when empty: no scheduling data in this trace (record it with --sched)
-- columns:
--   step, phase, dur_ns
--   waiting_ns     runnable-not-running time, summed over the inference threads
--   preempted_ns   its part after a preemption; the rest waited for a CPU after a wakeup
--   stalled_ns     time in which any inference thread was waiting
--   explains       stalled_ns over dur_ns
--   others_ns      other tasks' run time on the target's CPUs during the step
--   top            the task that ran longest during the step ("process/thread tid"), if any
--   top_ns         its run time there

INCLUDE PERFETTO MODULE profinfer.prelude.sched;

CREATE PERFETTO VIEW profinfer_interference AS
WITH taken AS (
  SELECT st.step, o.utid, o.process, o.thread, o.tid,
         SUM(MIN(o.ts + o.dur, st.ts + st.dur) - MAX(o.ts, st.ts)) AS ns
  FROM profinfer_step_interference st JOIN profinfer_other_run o
    ON o.ts < st.ts + st.dur AND o.ts + o.dur > st.ts
  GROUP BY st.step, o.utid
),
ranked AS (
  SELECT step, process, thread, tid, ns,
         ROW_NUMBER() OVER (PARTITION BY step ORDER BY ns DESC, tid) AS rn
  FROM taken
)
SELECT s.step, s.phase, s.dur AS dur_ns, s.waiting AS waiting_ns, s.preempted AS preempted_ns,
       s.stalled AS stalled_ns, ROUND(1.0 * s.stalled / MAX(s.dur, 1), 4) AS explains,
       s.others AS others_ns,
       r.process || '/' || r.thread || ' ' || r.tid AS top, r.ns AS top_ns
FROM profinfer_step_interference s
LEFT JOIN ranked r ON r.step = s.step AND r.rn = 1
WHERE EXISTS (SELECT 1 FROM sched)
ORDER BY s.step;
