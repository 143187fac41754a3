-- Per-step inputs of the trainers' mismatch metrics and keep statistics
-- (pdm_replay.report.mismatch; the math is pdm_replay.math.mismatch). A step's batch is
-- every loss token of its responses once: a replay may draw one token into several
-- seeds, the first seed's row stands for it (log-probs and decisions are those of pi_pre,
-- the same in every seed).

-- name: mismatch_steps
SELECT DISTINCT step FROM tokens WHERE step IS NOT NULL ORDER BY step;

-- name: mismatch_step_tokens
SELECT * EXCLUDE (seed, support_ids, support_logp_behavior, support_logp_pre)
FROM tokens
WHERE step = $step
QUALIFY row_number() OVER (PARTITION BY sample_id, pos ORDER BY seed NULLS FIRST) = 1
ORDER BY sample_id, pos;
