-- prelude.sched: what the scheduler did to the inference threads, and who else ran (--sched).
--
--   profinfer_runnable  (record --sched) one row per time an inference thread (one with token
--                    steps, graphs or ops) was runnable but not running: utid, tid, ts, dur,
--                    state, preempted (1: it was switched out while runnable, R+ or, on
--                    kernels whose preemption is lazy (6.13+), R with no waker; 0: it was woken
--                    and waited for a CPU), cpu (where it then ran)
--   profinfer_other_run (record --sched) one row per time another task (any but the idle task
--                    and the inference threads) ran on the target's CPUs: utid, tid, thread,
--                    pid, process, cpu, ts, dur
--   profinfer_contended (record --sched) the times the target wanted CPUs: each a token step or
--                    a time an inference thread waited for one, overlapping ones merged: ts, dur
--   profinfer_step_interference (record --sched) one row per token step: step, phase, ts, dur,
--                    waiting (summed over threads), preempted (its part after a preemption),
--                    stalled (time in which any inference thread waited), others (other
--                    tasks' run time on the target's CPUs)

INCLUDE PERFETTO MODULE profinfer.prelude.steps;

CREATE TABLE profinfer_inference_thread AS
SELECT DISTINCT t.utid, t.tid FROM thread_track tt JOIN thread t USING (utid);

CREATE TABLE profinfer_runnable AS
SELECT r.utid, i.tid, r.ts, r.dur, r.state,
       CASE WHEN r.state = 'R+' OR r.waker_utid IS NULL THEN 1 ELSE 0 END AS preempted, n.cpu
FROM (SELECT utid, ts, dur, state, waker_utid FROM thread_state
      WHERE state IN ('R', 'R+') AND dur > 0) r
JOIN profinfer_inference_thread i USING (utid)
LEFT JOIN (SELECT utid, ts, cpu FROM thread_state WHERE state = 'Running') n
  ON n.utid = r.utid AND n.ts = r.ts + r.dur;

CREATE TABLE profinfer_other_run AS
SELECT s.utid, t.tid, t.name AS thread, p.pid, p.name AS process, s.cpu, s.ts, s.dur
FROM (SELECT utid, cpu, ts, dur FROM sched WHERE utid <> 0 AND dur > 0
      AND utid NOT IN (SELECT utid FROM profinfer_inference_thread)) s
JOIN thread t USING (utid)
LEFT JOIN process p USING (upid);

-- Merging intervals: in start order, one begins a new merged interval where it starts after
-- every one before it ended; the merged interval spans its group.
CREATE TABLE profinfer_contended AS
WITH span AS (
  SELECT ts AS a, ts + dur AS b FROM profinfer_step
  UNION ALL
  SELECT ts, ts + dur FROM profinfer_runnable
),
ordered AS (
  SELECT a, b, MAX(b) OVER (ORDER BY a, b ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
         AS before
  FROM span
),
grouped AS (
  SELECT a, b, SUM(CASE WHEN before IS NULL OR a > before THEN 1 ELSE 0 END)
         OVER (ORDER BY a, b ROWS UNBOUNDED PRECEDING) AS grp
  FROM ordered
)
SELECT MIN(a) AS ts, MAX(b) - MIN(a) AS dur FROM grouped GROUP BY grp;

-- A step's stalled time is the union of its threads' waits: each wait (clipped to the step)
-- counts from where the ones before it, in start order, ended.
CREATE TABLE profinfer_step_interference AS
WITH piece AS (
  SELECT st.step, r.preempted, MAX(r.ts, st.ts) AS a, MIN(r.ts + r.dur, st.ts + st.dur) AS b
  FROM profinfer_step st JOIN profinfer_runnable r
    ON r.ts < st.ts + st.dur AND r.ts + r.dur > st.ts
),
merged AS (
  SELECT step, preempted, a, b,
         MAX(b) OVER (PARTITION BY step ORDER BY a, b
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
  FROM piece
),
waits AS (
  SELECT step, SUM(b - a) AS waiting, SUM(CASE WHEN preempted = 1 THEN b - a ELSE 0 END)
         AS preempted, SUM(MAX(b - MAX(a, COALESCE(before, a)), 0)) AS stalled
  FROM merged GROUP BY step
),
others AS (
  SELECT st.step, SUM(MIN(o.ts + o.dur, st.ts + st.dur) - MAX(o.ts, st.ts)) AS others
  FROM profinfer_step st JOIN profinfer_other_run o
    ON o.ts < st.ts + st.dur AND o.ts + o.dur > st.ts
  GROUP BY st.step
)
SELECT st.step, st.phase, st.ts, st.dur, COALESCE(w.waiting, 0) AS waiting,
       COALESCE(w.preempted, 0) AS preempted, COALESCE(w.stalled, 0) AS stalled,
       COALESCE(o.others, 0) AS others
FROM profinfer_step st
LEFT JOIN waits w USING (step)
LEFT JOIN others o USING (step);
