-- Core views: settings, seeds, the out-of-region set and the ratio/predictive decision pairs.
-- `comparisons` (registered from pdm_replay.report.comparisons) lists every registered
-- (ratio, predictive) mask pair at each threshold setting analyzed, with the region of its
-- predictive mask's proximity criterion as the registry builds it (outside
-- low <= stat <= high, stat a tokens/v1 column) and its predictive slope column: both
-- masks share that region, so any difference between them is one of direction.
-- Decisions are re-derived from stored columns (the registry's rule,
-- pdm_replay.math.mask_ops.away: masked iff outside and sign(A) * slope > 0), so they exist
-- at any threshold, not only at those the keep_<mask> columns were written at. No mask and
-- no statistic is named here: the statistic and slope columns are unpivoted by the
-- patterns of report_regions (report_regions.sql).

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

-- Each region of a comparison: the family whose divergence Delta D measures (d_pre is that
-- family's top-K divergence, the predictive slopes d_agg / d_uniform its estimators) and
-- the test "outside [low, high]" on the comparison's statistic.
CREATE OR REPLACE VIEW regions AS
SELECT DISTINCT family, region, delta, stat, low, high FROM comparisons;

-- One row per (family, region, delta, token) outside the region (NaN is never outside, as
-- in torch; a NULL statistic is dropped by UNPIVOT). d_local is the local term of the KL
-- slope (pi_k - mu_k); the TV slope has no separate local column.
CREATE OR REPLACE VIEW out_of_region AS
WITH v AS (
    UNPIVOT (
        SELECT seed, sample_id, pos, step, token_id, advantage, ratio, logp_behavior,
               logp_train, kl_topk, tv_topk, dkl_local, dkl_agg, dkl_uniform, dtv_agg,
               dtv_uniform, dkl_exact,
               COLUMNS(getvariable('report_regions').stat_columns) AS 'region_stat:\1'
        FROM tokens
    ) ON COLUMNS('^region_stat:') INTO NAME stat_column VALUE stat_value
)
SELECT g.family, g.region, v.seed, v.sample_id, v.pos, v.step, v.token_id, v.advantage,
       v.ratio, v.logp_behavior, v.logp_train,
       CASE g.family WHEN 'kl' THEN v.kl_topk ELSE v.tv_topk END AS d_pre, g.delta,
       CASE g.family WHEN 'kl' THEN v.dkl_local END AS d_local,
       CASE g.family WHEN 'kl' THEN v.dkl_agg ELSE v.dtv_agg END AS d_agg,
       CASE g.family WHEN 'kl' THEN v.dkl_uniform ELSE v.dtv_uniform END AS d_uniform,
       CASE g.family WHEN 'kl' THEN v.dkl_exact END AS d_exact,
       v.stat_value AS region_value,
       moves_away(v.advantage, v.ratio - 1) AS away_ratio
FROM v
JOIN regions AS g ON v.stat_column = 'region_stat:' || g.stat
WHERE NOT isnan(v.stat_value) AND NOT (v.stat_value BETWEEN g.low AND g.high);

-- The predictive slope columns of the comparisons, one row per token and column (NULLs
-- kept: a NULL slope never moves away, so the predictive mask keeps the token).
CREATE OR REPLACE VIEW slope_values AS
SELECT *
FROM (
    SELECT seed, sample_id, pos,
           COLUMNS(getvariable('report_regions').slope_columns) AS 'slope:\1'
    FROM tokens
) UNPIVOT INCLUDE NULLS (slope_value FOR slope_column IN (COLUMNS('^slope:')));

-- Out-of-region tokens x each comparison of their region: both masks' decisions (in the
-- region nothing is masked, so keep = NOT away).
CREATE OR REPLACE VIEW direction_pairs AS
SELECT o.* EXCLUDE (d_agg, d_uniform, away_ratio),
       c.pair, c.estimator, c.ratio_mask, c.predictive_mask, c.ratio_update,
       c.predictive_update, s.slope_value AS d_predictive,
       NOT o.away_ratio AS keep_ratio,
       NOT moves_away(o.advantage, s.slope_value) AS keep_predictive
FROM out_of_region AS o
JOIN comparisons AS c ON c.family = o.family AND c.region = o.region AND c.delta = o.delta
JOIN slope_values AS s
  ON s.seed IS NOT DISTINCT FROM o.seed AND s.sample_id = o.sample_id AND s.pos = o.pos
 AND s.slope_column = 'slope:' || c.slope;

-- Tokens where the two masks of a registered pair (table mask_pairs: any registered pair
-- of a divergence family, masks of --mask-module included) decided differently, read from
-- their stored keep_<mask> columns (unpivoted, so no mask is named here; a column the run
-- lacks is NULL in `tokens` and dropped by UNPIVOT). The two masks of a pair share one
-- proximity criterion and nothing is masked inside it, so every such token is outside the
-- pair's own region at the run's thresholds: no region test is repeated here. One row per
-- token and pair; scope names the pair: disagreement_<predictive mask>, or
-- disagreement_<ratio mask>_<predictive mask> where that predictive mask has two partners.
CREATE OR REPLACE VIEW pair_disagreements AS
WITH k AS MATERIALIZED (
    UNPIVOT (
        SELECT seed, sample_id, pos, COLUMNS('^keep_')
        FROM tokens
    ) ON COLUMNS('^keep_') INTO NAME keep_column VALUE keep
),
p AS (
    SELECT ord, family, ratio_mask, predictive_mask, ratio_keep, predictive_keep,
           'disagreement_'
               || CASE WHEN count(*) OVER (PARTITION BY predictive_mask) > 1
                       THEN ratio_mask || '_' ELSE '' END
               || predictive_mask AS scope
    FROM mask_pairs
)
SELECT r.seed, r.sample_id, r.pos, p.ord AS pair_ord, p.scope, p.family, p.ratio_mask,
       p.predictive_mask
FROM p
JOIN k AS r ON r.keep_column = p.ratio_keep
JOIN k AS q
  ON q.keep_column = p.predictive_keep AND q.seed IS NOT DISTINCT FROM r.seed
 AND q.sample_id = r.sample_id AND q.pos = r.pos
WHERE r.keep <> q.keep;
