-- prelude.steps: the token steps, from the pivoted args every other table reads too.
-- Built from trace_processor's `slice` and `args` tables as profinfer-perfetto's traces fill
-- them. Arg keys are `debug.` + the names in model/names.py.
--
--   profinfer_slice_args  one row per arg set with profinfer args: a column per arg
--   profinfer_step   one row per token step: step, phase (prefill, decode, mixed, encode),
--                    n_tokens, sequences (in its batch), pos (its first token's position, NULL
--                    where unknown), kv_len (pos + n_tokens for a one-sequence batch), ts, dur
--   profinfer_seq_step  one row per (sequence, token step that held its tokens): seq, step,
--                    n_tokens (its tokens in the step), pos (its first one's position, NULL
--                    where unknown), ts, dur (the step's)
--
-- For speed on trace_processor, whose `slice`, `thread_track` and `thread` are virtual tables,
-- each step first copies the few rows it needs (slices picked by their arg set or name) into a
-- table of its own and joins only such tables: a join of a large table with a virtual one can
-- make SQLite's planner scan the virtual one per row (minutes on a 1 M-op trace). Arg sets are
-- few (one per distinct set of args), so pivoting them is cheap. `+arg_set_id IN (...)` keeps
-- the built-in engine's SQLite from indexing all of `slice` to pick the op slices (4x slower).

CREATE TABLE profinfer_slice_args AS
SELECT
  arg_set_id,
  MAX(CASE WHEN key = 'debug.op' THEN string_value END) AS op,
  MAX(CASE WHEN key = 'debug.subop' THEN string_value END) AS subop,
  MAX(CASE WHEN key = 'debug.tensor' THEN string_value END) AS tensor,
  MAX(CASE WHEN key = 'debug.role' THEN string_value END) AS role,
  MAX(CASE WHEN key = 'debug.layer' THEN int_value END) AS layer,
  MAX(CASE WHEN key = 'debug.node' THEN int_value END) AS node,
  MAX(CASE WHEN key = 'debug.description' THEN int_value END) AS description,
  MAX(CASE WHEN key = 'debug.dtype' THEN string_value END) AS dtype,
  MAX(CASE WHEN key = 'debug.src0_dtype' THEN string_value END) AS src0_dtype,
  MAX(CASE WHEN key = 'debug.src0' THEN string_value END) AS src0,
  MAX(CASE WHEN key = 'debug.flops' THEN int_value END) AS flops,
  MAX(CASE WHEN key = 'debug.bytes' THEN int_value END) AS bytes,
  MAX(CASE WHEN key = 'debug.graph' THEN int_value END) AS graph,
  MAX(CASE WHEN key = 'debug.backend' THEN string_value END) AS backend,
  MAX(CASE WHEN key = 'debug.token_step' THEN int_value END) AS token_step,
  MAX(CASE WHEN key = 'debug.n_nodes' THEN int_value END) AS n_nodes,
  MAX(CASE WHEN key = 'debug.n_threads' THEN int_value END) AS n_threads,
  MAX(CASE WHEN key = 'debug.step' THEN int_value END) AS step,
  MAX(CASE WHEN key = 'debug.phase' THEN string_value END) AS phase,
  MAX(CASE WHEN key = 'debug.n_tokens' THEN int_value END) AS n_tokens,
  MAX(CASE WHEN key = 'debug.sequences' THEN int_value END) AS sequences,
  MAX(CASE WHEN key = 'debug.pos' THEN int_value END) AS pos,
  MAX(CASE WHEN key = 'debug.experts' THEN string_value END) AS experts,
  MAX(CASE WHEN key = 'debug.routed_tokens' THEN int_value END) AS routed_tokens,
  MAX(CASE WHEN key = 'debug.seq' THEN int_value END) AS seq,
  MAX(CASE WHEN key = 'debug.seq_tokens' THEN int_value END) AS seq_tokens,
  MAX(CASE WHEN key = 'debug.seq_pos' THEN int_value END) AS seq_pos,
  MAX(CASE WHEN key = 'debug.peak_kind' THEN string_value END) AS peak_kind,
  MAX(CASE WHEN key = 'debug.peak_dtype' THEN string_value END) AS peak_dtype,
  MAX(CASE WHEN key = 'debug.peak_threads' THEN int_value END) AS peak_threads,
  MAX(CASE WHEN key = 'debug.peak_value' THEN real_value END) AS peak_value,
  MAX(CASE WHEN key = 'debug.device_time' THEN string_value END) AS device_time,
  MAX(CASE WHEN key = 'debug.copy_bytes' THEN int_value END) AS copy_bytes,
  MAX(CASE WHEN key = 'debug.direction' THEN string_value END) AS direction
FROM args
WHERE key IN ('debug.op', 'debug.subop', 'debug.tensor', 'debug.role', 'debug.layer',
              'debug.node', 'debug.description', 'debug.dtype', 'debug.src0_dtype',
              'debug.src0', 'debug.flops', 'debug.bytes', 'debug.graph',
              'debug.backend', 'debug.token_step', 'debug.n_nodes', 'debug.n_threads',
              'debug.step', 'debug.phase', 'debug.n_tokens', 'debug.sequences', 'debug.pos',
              'debug.experts', 'debug.routed_tokens', 'debug.seq', 'debug.seq_tokens',
              'debug.seq_pos', 'debug.peak_kind', 'debug.peak_dtype', 'debug.peak_threads',
              'debug.peak_value', 'debug.device_time', 'debug.copy_bytes',
              'debug.direction')
GROUP BY arg_set_id;

CREATE INDEX profinfer_slice_args_id ON profinfer_slice_args (arg_set_id);

CREATE TABLE profinfer_step AS
SELECT a.step, a.phase, a.n_tokens, COALESCE(a.sequences, 1) AS sequences, a.pos,
       CASE WHEN COALESCE(a.sequences, 1) = 1 THEN a.pos + a.n_tokens END AS kv_len, s.ts, s.dur,
       s.id AS slice_id
FROM (SELECT id, ts, dur, arg_set_id FROM slice WHERE +arg_set_id IN
        (SELECT arg_set_id FROM profinfer_slice_args
         WHERE phase IS NOT NULL AND step IS NOT NULL)) s
JOIN profinfer_slice_args a USING (arg_set_id);

-- Each (sequence, step) slice has args of its own (they name the step), so the arg sets alone
-- are the rows.
CREATE TABLE profinfer_seq_step AS
SELECT a.seq, a.token_step AS step, a.seq_tokens AS n_tokens, a.seq_pos AS pos, st.ts, st.dur
FROM profinfer_slice_args a
JOIN profinfer_step st ON st.step = a.token_step
WHERE a.seq IS NOT NULL;
