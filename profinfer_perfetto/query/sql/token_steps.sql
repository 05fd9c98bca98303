-- token_steps: every token step, in order: the distribution behind token_latency.
-- columns:
--   step, phase, n_tokens
--   pos         position of the step's first token since the capture began
--   dur_ns      step latency
--   tokens_per_s
SELECT step, phase, n_tokens, pos, dur AS dur_ns,
       ROUND(n_tokens * 1e9 / dur, 2) AS tokens_per_s
FROM profinfer_step
ORDER BY step;
