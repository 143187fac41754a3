-- Table macros of the dashboard (pdm_replay.report.dashboard_api), created once per
-- connection on top of the report views. Filter arguments are NULL for "any".

-- Disagreement tokens (view `disagreements`) of a comparison pair (p_pair: its label
-- `<ratio mask> vs <predictive mask>`) with delta_d = Delta D under the chosen update:
-- `own` (the update of the mask that kept the token), 'ratio' / 'predictive' (the update of
-- that mask of the pair, at the comparison's delta), `none` (every token kept) or `actual`
-- (the trainer's real step); the basis names are report_run's (pdm_replay.names).
CREATE OR REPLACE MACRO dashboard_disagreements(p_pair, p_family, p_estimator, p_seed,
                                                p_update, p_kept_by, p_adv_sign,
                                                p_delta_sign) AS TABLE
WITH d AS (
    SELECT *,
           CASE p_update WHEN 'ratio' THEN delta_d_ratio
                         WHEN 'predictive' THEN delta_d_predictive
                         WHEN getvariable('report_run').none THEN delta_d_none
                         WHEN getvariable('report_run').actual THEN delta_d_actual
                         ELSE delta_d_kept END AS delta_d,
           CASE p_update WHEN 'ratio' THEN ratio_update
                         WHEN 'predictive' THEN predictive_update
                         WHEN getvariable('report_run').none THEN getvariable('report_run').none
                         WHEN getvariable('report_run').actual THEN getvariable('report_run').actual
                         ELSE CASE kept_by WHEN 'ratio' THEN ratio_update
                                           ELSE predictive_update END END AS update_mask
    FROM disagreements
    WHERE (p_pair IS NULL OR pair = p_pair)
      AND (p_family IS NULL OR family = p_family)
      AND (p_estimator IS NULL OR estimator = p_estimator)
      AND (p_seed IS NULL OR seed = p_seed)
      AND (p_kept_by IS NULL OR kept_by = p_kept_by)
      AND (p_adv_sign IS NULL OR sign(advantage) = p_adv_sign)
)
SELECT * FROM d
WHERE p_delta_sign IS NULL OR sign(delta_d) = p_delta_sign;

-- Values of one whitelisted per-token column: D_pre of either family, or the top-K mass of
-- the behavior (1 - mu_tail) or training (1 - pi_tail) distribution.
CREATE OR REPLACE MACRO dashboard_values(p_column) AS TABLE
SELECT CASE p_column WHEN 'kl_topk' THEN kl_topk
                     WHEN 'tv_topk' THEN tv_topk
                     WHEN 'mu_mass' THEN 1 - mu_tail
                     WHEN 'pi_mass' THEN 1 - pi_tail END AS v
FROM tokens;
