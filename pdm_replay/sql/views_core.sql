-- Core views: settings, seeds, the out-of-region set and the ratio/predictive decision pairs.
-- Families and estimators follow SPEC §4: family f in (kl, tv) compares dppo_topk_f (ratio
-- direction) with pdm_f_agg and pdm_f_uniform (predictive direction, same proximity test
-- f_topk > delta_f), so any difference between them is a difference of direction criterion.

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
       keep_dppo_topk_kl AS keep_ratio, keep_pdm_kl_agg AS keep_agg,
       keep_pdm_kl_uniform AS keep_uniform
FROM tokens
WHERE kl_topk > getvariable('report_run').delta_kl
UNION ALL
SELECT 'tv' AS family, seed, sample_id, pos, step, token_id, advantage, ratio,
       logp_behavior, logp_train,
       tv_topk AS d_pre, getvariable('report_run').delta_tv AS delta,
       CAST(NULL AS DOUBLE) AS d_local, dtv_agg AS d_agg, dtv_uniform AS d_uniform,
       CAST(NULL AS DOUBLE) AS d_exact,
       keep_dppo_topk_tv AS keep_ratio, keep_pdm_tv_agg AS keep_agg,
       keep_pdm_tv_uniform AS keep_uniform
FROM tokens
WHERE tv_topk > getvariable('report_run').delta_tv;

-- Out-of-region tokens x estimator, where the run holds both masks of the pair.
CREATE OR REPLACE VIEW direction_pairs AS
SELECT *
FROM (
    SELECT o.* EXCLUDE (d_agg, d_uniform, keep_agg, keep_uniform),
           e.estimator,
           'dppo_topk_' || o.family AS ratio_mask,
           'pdm_' || o.family || '_' || e.estimator AS predictive_mask,
           CASE e.estimator WHEN 'agg' THEN o.d_agg ELSE o.d_uniform END AS d_predictive,
           CASE e.estimator WHEN 'agg' THEN o.keep_agg ELSE o.keep_uniform END
               AS keep_predictive
    FROM out_of_region AS o
    CROSS JOIN (VALUES ('agg'), ('uniform')) AS e(estimator)
)
WHERE keep_ratio IS NOT NULL AND keep_predictive IS NOT NULL;
