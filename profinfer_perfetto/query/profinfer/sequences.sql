-- sequences: per sequence, its prompt steps, its decode steps and its time to first token.
-- A sequence is a stream of one sequence id (a llama-server slot's request, one of a parallel
-- decode's streams). A sequence id's token steps in order make one request until its prompt
-- (several of its tokens in one step) follows its decoding, or its positions do not continue
-- (a slot reused); then a new one begins. A request's prompt is its steps up to the last one
-- with several of its tokens (its first step where none has); the rest decode.
-- columns:
--   seq, request     sequence id, and its request (1, 2, ...)
--   first_step, last_step
--   prompt_tokens, prompt_steps
--   decode_steps     steps that decoded one token of it
--   ttft_ns          from its first step's start to its last prompt step's end
--   decode_mean_ns, decode_max_ns   its decode steps' latency (a whole step's, shared with the
--                    other sequences in it)
--   tokens_per_s     its decoded tokens over its decode steps' time

INCLUDE PERFETTO MODULE profinfer.prelude.steps;

CREATE PERFETTO VIEW profinfer_sequences AS
WITH ordered AS (
  SELECT seq, step, n_tokens, pos, ts, dur,
         LAG(n_tokens) OVER (PARTITION BY seq ORDER BY step) AS prev_tokens,
         LAG(pos) OVER (PARTITION BY seq ORDER BY step) AS prev_pos
  FROM profinfer_seq_step
),
marked AS (
  SELECT seq, step, n_tokens, ts, dur,
         SUM(CASE WHEN prev_tokens IS NULL OR (n_tokens > 1 AND prev_tokens = 1)
                       OR pos <> prev_pos + prev_tokens THEN 1 ELSE 0 END)
           OVER (PARTITION BY seq ORDER BY step ROWS UNBOUNDED PRECEDING) AS request
  FROM ordered
),
bounds AS (
  SELECT seq, request, MIN(step) AS first_step, MAX(step) AS last_step,
         COALESCE(MAX(CASE WHEN n_tokens > 1 THEN step END), MIN(step)) AS prompt_end
  FROM marked GROUP BY seq, request
)
SELECT b.seq, b.request, b.first_step, b.last_step,
       SUM(CASE WHEN m.step <= b.prompt_end THEN m.n_tokens ELSE 0 END) AS prompt_tokens,
       SUM(CASE WHEN m.step <= b.prompt_end THEN 1 ELSE 0 END) AS prompt_steps,
       SUM(CASE WHEN m.step > b.prompt_end THEN 1 ELSE 0 END) AS decode_steps,
       MAX(CASE WHEN m.step = b.prompt_end THEN m.ts + m.dur END)
         - MIN(CASE WHEN m.step = b.first_step THEN m.ts END) AS ttft_ns,
       CAST(ROUND(AVG(CASE WHEN m.step > b.prompt_end THEN m.dur END)) AS INTEGER)
         AS decode_mean_ns,
       MAX(CASE WHEN m.step > b.prompt_end THEN m.dur END) AS decode_max_ns,
       ROUND(SUM(CASE WHEN m.step > b.prompt_end THEN m.n_tokens ELSE 0 END) * 1e9
             / MAX(SUM(CASE WHEN m.step > b.prompt_end THEN m.dur ELSE 0 END), 1), 2)
         AS tokens_per_s
FROM bounds b JOIN marked m USING (seq, request)
GROUP BY b.seq, b.request
ORDER BY b.first_step, b.seq;
