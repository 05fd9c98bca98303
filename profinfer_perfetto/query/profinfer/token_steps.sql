-- token_steps: every token step, in order: the distribution behind token_latency.
-- columns:
--   step, phase, n_tokens
--   sequences   sequences in the step's batch
--   pos         position of the step's first token (from the batch, else counted from the
--               start of a launched run; empty for a --pid capture that cannot know it)
--   dur_ns      step latency
--   tokens_per_s

INCLUDE PERFETTO MODULE profinfer.prelude.steps;

CREATE PERFETTO VIEW profinfer_token_steps AS
SELECT step, phase, n_tokens, sequences, pos, dur AS dur_ns,
       ROUND(n_tokens * 1e9 / dur, 2) AS tokens_per_s
FROM profinfer_step
ORDER BY step;
