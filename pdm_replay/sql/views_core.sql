-- Core views: settings, seeds, the out-of-region set and the ratio/predictive decision pairs.
-- The pairs are the registry's (table mask_pairs, from pdm_replay.masks.mask_pairs): a
-- ratio-direction and a predictive-direction mask of one family's proximity test
-- f_topk > delta_f (SPEC §4), so any difference between them is a difference of direction
-- criterion. No mask is named here: their keep_<mask> columns are read through mask_pairs.

-- The keep columns of every registry pair (tokens has all of them: tokens_template).
SET VARIABLE pair_keep_columns = (
    SELECT list(DISTINCT c ORDER BY c)
    FROM (SELECT ratio_keep AS c FROM mask_pairs UNION ALL
          SELECT predictive_keep FROM mask_pairs));

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

-- One row per (family, token) with D_pre > delta. d_local is the local term of the KL slope
-- (pi_k - mu_k); the TV slope has no separate local column.
CREATE OR REPLACE VIEW out_of_region AS
SELECT 'kl' AS family, seed, sample_id, pos, step, token_id, advantage, ratio,
       logp_behavior, logp_train,
       kl_topk AS d_pre, getvariable('report_run').delta_kl AS delta,
       dkl_local AS d_local, dkl_agg AS d_agg, dkl_uniform AS d_uniform, dkl_exact AS d_exact,
       COLUMNS(lambda c: list_contains(getvariable('pair_keep_columns'), c))
FROM tokens
WHERE kl_topk > getvariable('report_run').delta_kl
UNION ALL
SELECT 'tv' AS family, seed, sample_id, pos, step, token_id, advantage, ratio,
       logp_behavior, logp_train,
       tv_topk AS d_pre, getvariable('report_run').delta_tv AS delta,
       CAST(NULL AS DOUBLE) AS d_local, dtv_agg AS d_agg, dtv_uniform AS d_uniform,
       CAST(NULL AS DOUBLE) AS d_exact,
       COLUMNS(lambda c: list_contains(getvariable('pair_keep_columns'), c))
FROM tokens
WHERE tv_topk > getvariable('report_run').delta_tv;

-- Out-of-region tokens x registry pair of their family, where the run holds both masks:
-- the pair's two keep columns unpivoted to rows, then the pair's two decisions side by side.
CREATE OR REPLACE VIEW direction_pairs AS
WITH k AS (
    UNPIVOT (SELECT family, seed, sample_id, pos,
                    COLUMNS(lambda c: list_contains(getvariable('pair_keep_columns'), c))
             FROM out_of_region)
    ON COLUMNS('^keep_') INTO NAME keep_column VALUE keep
),
pk AS (
    SELECT k.family, k.seed, k.sample_id, k.pos, p.ord, p.estimator, p.ratio_mask,
           p.predictive_mask,
           any_value(k.keep) FILTER (WHERE k.keep_column = p.ratio_keep) AS keep_ratio,
           any_value(k.keep) FILTER (WHERE k.keep_column = p.predictive_keep)
               AS keep_predictive
    FROM k
    JOIN mask_pairs AS p
      ON p.family = k.family AND k.keep_column IN (p.ratio_keep, p.predictive_keep)
    GROUP BY k.family, k.seed, k.sample_id, k.pos, p.ord, p.estimator, p.ratio_mask,
             p.predictive_mask
),
b AS (
    SELECT COLUMNS(lambda c: NOT list_contains(getvariable('pair_keep_columns'), c))
    FROM out_of_region
)
SELECT b.* EXCLUDE (d_agg, d_uniform), pk.keep_ratio, pk.estimator, pk.ratio_mask,
       pk.predictive_mask,
       CASE pk.estimator WHEN 'agg' THEN b.d_agg WHEN 'uniform' THEN b.d_uniform END
           AS d_predictive,
       pk.keep_predictive
FROM b
JOIN pk
  ON pk.family = b.family AND pk.seed IS NOT DISTINCT FROM b.seed
 AND pk.sample_id = b.sample_id AND pk.pos = b.pos
WHERE pk.keep_ratio IS NOT NULL AND pk.keep_predictive IS NOT NULL;
