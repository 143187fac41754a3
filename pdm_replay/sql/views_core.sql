-- Core views: settings, seeds, the out-of-region set and the ratio/predictive decision pairs.
-- `comparisons` (registered from pdm_replay.report.comparisons) lists every registered
-- (ratio, predictive) pair of a family f at each threshold delta analysed: both share the
-- proximity test f_topk > delta, so any difference between them is one of direction.
-- Decisions are re-derived from stored columns (the registry's rule,
-- pdm_replay.math.mask_ops.away: masked iff outside and sign(A) * slope > 0), so they exist at any delta, not only at the
-- thresholds the keep_<mask> columns were written at.

CREATE OR REPLACE VIEW settings AS
SELECT getvariable('report_run').kind AS kind,
       getvariable('report_run').eps AS eps,
       getvariable('report_run').eps_low AS eps_low,
       getvariable('report_run').eps_high AS eps_high,
       getvariable('report_run').delta_kl AS delta_kl,
       getvariable('report_run').delta_tv AS delta_tv,
       getvariable('report_run').thresholds_source AS thresholds_source;

CREATE OR REPLACE VIEW seeds AS
SELECT DISTINCT seed FROM tokens;

-- "Moves away" as torch decides it: NaN compares false there (DuckDB orders NaN above
-- every number, so it is excluded explicitly); A = 0 gives 0, never away.
CREATE OR REPLACE MACRO moves_away(a, slope) AS
    coalesce(NOT isnan(sign(a) * slope) AND sign(a) * slope > 0, false);

-- One row per (family, delta, token) with D_pre > delta. d_local is the local term of the
-- KL slope (pi_k - mu_k); the TV slope has no separate local column.
CREATE OR REPLACE VIEW out_of_region AS
WITH t AS (
    SELECT 'kl' AS family, seed, sample_id, pos, step, token_id, advantage, ratio,
           logp_behavior, logp_train, kl_topk AS d_pre, dkl_local AS d_local,
           dkl_agg AS d_agg, dkl_uniform AS d_uniform, dkl_exact AS d_exact
    FROM tokens
    WHERE NOT isnan(kl_topk)
      AND kl_topk > (SELECT min(delta) FROM comparisons WHERE family = 'kl')
    UNION ALL
    SELECT 'tv' AS family, seed, sample_id, pos, step, token_id, advantage, ratio,
           logp_behavior, logp_train, tv_topk AS d_pre, CAST(NULL AS DOUBLE) AS d_local,
           dtv_agg AS d_agg, dtv_uniform AS d_uniform, CAST(NULL AS DOUBLE) AS d_exact
    FROM tokens
    WHERE NOT isnan(tv_topk)
      AND tv_topk > (SELECT min(delta) FROM comparisons WHERE family = 'tv')
),
fd AS (SELECT DISTINCT family, delta FROM comparisons)
SELECT t.family, t.seed, t.sample_id, t.pos, t.step, t.token_id, t.advantage, t.ratio,
       t.logp_behavior, t.logp_train, t.d_pre, fd.delta, t.d_local, t.d_agg, t.d_uniform,
       t.d_exact, moves_away(t.advantage, t.ratio - 1) AS away_ratio
FROM t
JOIN fd ON fd.family = t.family AND t.d_pre > fd.delta;

-- Out-of-region tokens x each comparison of their family and delta: both masks' decisions
-- (in the region nothing is masked, so keep = NOT away).
CREATE OR REPLACE VIEW direction_pairs AS
SELECT o.* EXCLUDE (d_agg, d_uniform, away_ratio),
       c.estimator, c.ratio_mask, c.predictive_mask, c.ratio_update, c.predictive_update,
       CASE c.estimator WHEN 'agg' THEN o.d_agg ELSE o.d_uniform END AS d_predictive,
       NOT o.away_ratio AS keep_ratio,
       NOT moves_away(o.advantage, CASE c.estimator WHEN 'agg' THEN o.d_agg
                                                    ELSE o.d_uniform END) AS keep_predictive
FROM out_of_region AS o
JOIN comparisons AS c ON c.family = o.family AND c.delta = o.delta;

-- Out-of-region KL tokens (kl_topk > the run's delta_kl) where the two masks of a KL pair of
-- the registry (table mask_pairs: any registered pair, masks of --mask-module included)
-- decided differently, read from their stored keep_<mask> columns (unpivoted, so no mask
-- is named here; a column the run lacks is NULL in `tokens` and dropped by UNPIVOT). One
-- row per token and pair; scope names the pair: disagreement_<predictive mask>, or
-- disagreement_<ratio mask>_<predictive mask> where that predictive mask has two partners.
CREATE OR REPLACE VIEW kl_pair_disagreements AS
WITH k AS MATERIALIZED (
    UNPIVOT (
        SELECT seed, sample_id, pos, COLUMNS('^keep_')
        FROM tokens
        WHERE kl_topk > getvariable('report_run').delta_kl
    ) ON COLUMNS('^keep_') INTO NAME keep_column VALUE keep
),
p AS (
    SELECT ord, ratio_mask, predictive_mask, ratio_keep, predictive_keep,
           'disagreement_'
               || CASE WHEN count(*) OVER (PARTITION BY predictive_mask) > 1
                       THEN ratio_mask || '_' ELSE '' END
               || predictive_mask AS scope
    FROM mask_pairs
    WHERE family = 'kl'
)
SELECT r.seed, r.sample_id, r.pos, p.ord AS pair_ord, p.scope, p.ratio_mask,
       p.predictive_mask
FROM p
JOIN k AS r ON r.keep_column = p.ratio_keep
JOIN k AS q
  ON q.keep_column = p.predictive_keep AND q.seed IS NOT DISTINCT FROM r.seed
 AND q.sample_id = r.sample_id AND q.pos = r.pos
WHERE r.keep <> q.keep;
