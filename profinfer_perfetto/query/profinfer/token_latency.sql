-- token_latency: time to first token, decode step latency and tokens/s.
-- One row per phase (prefill, decode, mixed: several sequences not one token each, encode)
-- over its token steps.
-- columns:
--   phase
--   steps, tokens   token steps and the tokens they processed
--   first_ns        the phase's first step (for prefill: time to first token)
--   total_ns, mean_ns, p50_ns, p90_ns, max_ns   step latency (percentiles: nearest rank)
--   tokens_per_s    tokens over the phase's summed step time

INCLUDE PERFETTO MODULE profinfer.prelude.steps;

CREATE PERFETTO VIEW profinfer_token_latency AS
WITH ranked AS (
  SELECT phase, step, n_tokens, dur,
         ROW_NUMBER() OVER (PARTITION BY phase ORDER BY dur) AS rn,
         ROW_NUMBER() OVER (PARTITION BY phase ORDER BY ts) AS nth,
         COUNT(*) OVER (PARTITION BY phase) AS n
  FROM profinfer_step
)
SELECT phase, COUNT(*) AS steps, SUM(n_tokens) AS tokens,
       MAX(CASE WHEN nth = 1 THEN dur END) AS first_ns,
       SUM(dur) AS total_ns,
       CAST(ROUND(AVG(dur)) AS INTEGER) AS mean_ns,
       MAX(CASE WHEN rn = (n + 1) / 2 THEN dur END) AS p50_ns,
       MAX(CASE WHEN rn = (9 * n + 9) / 10 THEN dur END) AS p90_ns,
       MAX(dur) AS max_ns,
       ROUND(SUM(n_tokens) * 1e9 / SUM(dur), 2) AS tokens_per_s
FROM ranked
GROUP BY phase
ORDER BY phase DESC;
