-- Alignment of each direction criterion with the realized divergence change (SPEC §6).

-- Disagreement set: tokens outside a comparison's region where its ratio and predictive
-- masks decide differently, with the realized change of the pair's family's divergence
-- under each mask's own update (at this setting, where it was simulated), under `none` and
-- under `actual` (the trainer's real step).
-- delta_d_kept is Delta D under the own update of the mask that kept the token.
-- Every report reads it through `disagreements`, which cache_disagreements.sql may point
-- at a materialized copy (the set is small; computing it scans all updates).
CREATE OR REPLACE VIEW disagreements_live AS
WITH d AS MATERIALIZED (
    SELECT *, CASE WHEN keep_ratio THEN 'ratio' ELSE 'predictive' END AS kept_by
    FROM direction_pairs
    WHERE keep_ratio <> keep_predictive
),
post AS (
    SELECT d.seed, d.pair, d.delta, d.sample_id, d.pos,
           any_value(CASE d.family WHEN 'kl' THEN u.kl_topk_post ELSE u.tv_topk_post END)
               FILTER (WHERE u.update_mask = d.ratio_update) AS d_post_ratio,
           any_value(CASE d.family WHEN 'kl' THEN u.delta_kl_topk ELSE u.delta_tv_topk END)
               FILTER (WHERE u.update_mask = d.ratio_update) AS delta_d_ratio,
           any_value(CASE d.family WHEN 'kl' THEN u.kl_topk_post ELSE u.tv_topk_post END)
               FILTER (WHERE u.update_mask = d.predictive_update) AS d_post_predictive,
           any_value(CASE d.family WHEN 'kl' THEN u.delta_kl_topk ELSE u.delta_tv_topk END)
               FILTER (WHERE u.update_mask = d.predictive_update) AS delta_d_predictive,
           any_value(CASE d.family WHEN 'kl' THEN u.delta_kl_topk ELSE u.delta_tv_topk END)
               FILTER (WHERE u.update_mask = getvariable('report_run').none) AS delta_d_none,
           any_value(CASE d.family WHEN 'kl' THEN u.delta_kl_topk ELSE u.delta_tv_topk END)
               FILTER (WHERE u.update_mask = getvariable('report_run').actual) AS delta_d_actual,
           any_value(u.logp_post) FILTER (WHERE u.update_mask = d.ratio_update)
               AS logp_post_ratio,
           any_value(u.logp_post) FILTER (WHERE u.update_mask = d.predictive_update)
               AS logp_post_predictive
    FROM d
    JOIN updates AS u
      ON u.seed = d.seed AND u.sample_id = d.sample_id AND u.pos = d.pos
    WHERE u.update_mask IN (d.ratio_update, d.predictive_update, getvariable('report_run').none,
                            getvariable('report_run').actual)
    GROUP BY d.seed, d.pair, d.delta, d.sample_id, d.pos
)
SELECT d.seed, d.pair, d.family, d.estimator, d.region, d.ratio_mask, d.predictive_mask,
       d.ratio_update, d.predictive_update,
       d.sample_id, d.pos, d.step, d.token_id, d.advantage, d.ratio,
       d.logp_behavior, d.logp_train, d.d_pre, d.delta, d.d_local, d.d_predictive, d.d_exact,
       d.keep_ratio, d.keep_predictive, d.kept_by,
       p.d_post_ratio, p.delta_d_ratio, p.d_post_predictive, p.delta_d_predictive,
       p.delta_d_none, p.delta_d_actual, p.logp_post_ratio, p.logp_post_predictive,
       CASE d.kept_by WHEN 'ratio' THEN p.delta_d_ratio ELSE p.delta_d_predictive END
           AS delta_d_kept
FROM d
LEFT JOIN post AS p
  ON p.seed IS NOT DISTINCT FROM d.seed AND p.pair = d.pair AND p.delta = d.delta
 AND p.sample_id = d.sample_id AND p.pos = d.pos;

CREATE OR REPLACE VIEW disagreements AS
SELECT * FROM disagreements_live;

-- Kept disagreement tokens with the Delta D that measures them under each basis: `own`
-- (the keeping mask's own update), `none`, `actual`.
CREATE OR REPLACE VIEW kept_measured AS
SELECT d.seed, d.pair, d.family, d.estimator, d.region, d.delta, d.sample_id, d.pos,
       d.kept_by, b.basis,
       CASE b.basis WHEN getvariable('report_run').own THEN d.delta_d_kept
                    WHEN getvariable('report_run').none THEN d.delta_d_none
                    ELSE d.delta_d_actual END AS delta_d
FROM disagreements AS d
CROSS JOIN bases AS b;

-- Per seed, basis, comparison (pair, delta; family, estimator and region describe it) and
-- direction (the mask that kept
-- the token): unsafe keep rate = n_unsafe / n_measured, corrective rate = n_corrective /
-- n_measured, over disagreement tokens kept by that mask (n_measured: those with a Delta D
-- under the basis). update_mask names the update measured.
CREATE OR REPLACE VIEW alignment_by_seed AS
WITH oor AS (
    SELECT seed, family, region, delta, count(*) AS n_out_of_region
    FROM out_of_region GROUP BY seed, family, region, delta
),
grid AS (
    SELECT s.seed, b.basis, b.basis_ord, c.ord, c.pair, c.family, c.estimator, c.region,
           c.delta, x.direction,
           CASE WHEN b.basis <> getvariable('report_run').own THEN b.basis
                WHEN x.direction = 'ratio' THEN c.ratio_update
                ELSE c.predictive_update END AS update_mask
    FROM seeds AS s
    CROSS JOIN comparisons AS c
    CROSS JOIN bases AS b
    CROSS JOIN (VALUES ('ratio'), ('predictive')) AS x(direction)
    WHERE b.basis <> getvariable('report_run').own OR c.own_in_grid
),
kept AS (
    SELECT seed, basis, pair, delta, kept_by AS direction,
           count(*) AS n_kept,
           count(delta_d) AS n_measured,
           count(*) FILTER (WHERE delta_d > 0) AS n_unsafe,
           count(*) FILTER (WHERE delta_d < 0) AS n_corrective
    FROM kept_measured
    GROUP BY ALL
)
SELECT g.seed, g.basis, g.pair, g.family, g.estimator, g.region, g.delta, g.direction,
       g.update_mask,
       coalesce(o.n_out_of_region, 0) AS n_out_of_region,
       CAST(coalesce(sum(k.n_kept) OVER (PARTITION BY g.seed, g.basis, g.pair, g.delta), 0)
            AS BIGINT) AS n_disagree,
       coalesce(k.n_kept, 0) AS n_kept,
       coalesce(k.n_measured, 0) AS n_measured,
       coalesce(k.n_unsafe, 0) AS n_unsafe,
       coalesce(k.n_corrective, 0) AS n_corrective,
       k.n_unsafe / nullif(k.n_measured, 0) AS unsafe_keep_rate,
       k.n_corrective / nullif(k.n_measured, 0) AS corrective_rate,
       g.basis_ord, g.ord
FROM grid AS g
LEFT JOIN oor AS o
  ON o.seed IS NOT DISTINCT FROM g.seed AND o.family = g.family AND o.region = g.region
 AND o.delta = g.delta
LEFT JOIN kept AS k
  ON k.seed IS NOT DISTINCT FROM g.seed AND k.basis = g.basis AND k.pair = g.pair
 AND k.delta = g.delta AND k.direction = g.direction;

-- Per seed: unsafe keep and corrective rates of the ratio and the predictive mask side by
-- side. unsafe_diff = ratio - predictive, so a win (predictive lower) is unsafe_diff > 0;
-- 'empty' when a side kept no measured disagreement token (no rate to compare).
CREATE OR REPLACE VIEW seed_rates AS
SELECT seed, basis, pair, family, estimator, region, delta,
       any_value(n_out_of_region) AS n_out_of_region,
       any_value(n_disagree) AS n_disagree,
       any_value(n_measured) FILTER (WHERE direction = 'ratio') AS n_measured_ratio,
       any_value(n_measured) FILTER (WHERE direction = 'predictive') AS n_measured_predictive,
       any_value(unsafe_keep_rate) FILTER (WHERE direction = 'ratio') AS unsafe_ratio,
       any_value(unsafe_keep_rate) FILTER (WHERE direction = 'predictive')
           AS unsafe_predictive,
       any_value(corrective_rate) FILTER (WHERE direction = 'ratio') AS corrective_ratio,
       any_value(corrective_rate) FILTER (WHERE direction = 'predictive')
           AS corrective_predictive,
       unsafe_ratio - unsafe_predictive AS unsafe_diff,
       CASE WHEN unsafe_diff > 0 THEN 'win'
            WHEN unsafe_diff < 0 THEN 'loss'
            WHEN unsafe_diff = 0 THEN 'tie'
            ELSE 'empty' END AS outcome,
       any_value(basis_ord) AS basis_ord, any_value(ord) AS ord
FROM alignment_by_seed
GROUP BY seed, basis, pair, family, estimator, region, delta;

-- Per (basis, comparison, sample, seed, direction): counts of the kept disagreement tokens,
-- the clusters of the sample-clustered bootstrap (pdm_replay.report.paired_tests).
CREATE OR REPLACE VIEW cluster_counts AS
SELECT basis, pair, family, estimator, region, delta, sample_id, seed, kept_by AS direction,
       count(delta_d) AS n_measured,
       count(*) FILTER (WHERE delta_d > 0) AS n_unsafe,
       count(*) FILTER (WHERE delta_d < 0) AS n_corrective
FROM kept_measured
GROUP BY ALL;
