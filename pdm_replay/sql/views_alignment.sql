-- Alignment of each direction criterion with the realized divergence change (SPEC §6).

-- Disagreement set: out-of-region tokens where the ratio and predictive masks decide
-- differently, with the realized change under each mask's own update and under `none`.
-- delta_d_kept is Delta D under the update of the mask that kept the token.
-- Every report reads it through `disagreements`, which cache_disagreements.sql may point
-- at a materialized copy (the set is small; computing it scans all updates).
CREATE OR REPLACE VIEW disagreements_live AS
WITH d AS MATERIALIZED (
    SELECT *, CASE WHEN keep_ratio THEN 'ratio' ELSE 'predictive' END AS kept_by
    FROM direction_pairs
    WHERE keep_ratio <> keep_predictive
),
post AS (
    SELECT d.seed, d.family, d.estimator, d.sample_id, d.pos,
           any_value(CASE d.family WHEN 'kl' THEN u.kl_topk_post ELSE u.tv_topk_post END)
               FILTER (WHERE u.update_mask = d.ratio_mask) AS d_post_ratio,
           any_value(CASE d.family WHEN 'kl' THEN u.delta_kl_topk ELSE u.delta_tv_topk END)
               FILTER (WHERE u.update_mask = d.ratio_mask) AS delta_d_ratio,
           any_value(CASE d.family WHEN 'kl' THEN u.kl_topk_post ELSE u.tv_topk_post END)
               FILTER (WHERE u.update_mask = d.predictive_mask) AS d_post_predictive,
           any_value(CASE d.family WHEN 'kl' THEN u.delta_kl_topk ELSE u.delta_tv_topk END)
               FILTER (WHERE u.update_mask = d.predictive_mask) AS delta_d_predictive,
           any_value(CASE d.family WHEN 'kl' THEN u.delta_kl_topk ELSE u.delta_tv_topk END)
               FILTER (WHERE u.update_mask = 'none') AS delta_d_none,
           any_value(u.logp_post) FILTER (WHERE u.update_mask = d.ratio_mask)
               AS logp_post_ratio,
           any_value(u.logp_post) FILTER (WHERE u.update_mask = d.predictive_mask)
               AS logp_post_predictive
    FROM d
    JOIN updates AS u
      ON u.seed = d.seed AND u.sample_id = d.sample_id AND u.pos = d.pos
    WHERE u.update_mask IN (d.ratio_mask, d.predictive_mask, 'none')
    GROUP BY d.seed, d.family, d.estimator, d.sample_id, d.pos
)
SELECT d.seed, d.family, d.estimator, d.ratio_mask, d.predictive_mask,
       d.sample_id, d.pos, d.step, d.token_id, d.advantage, d.ratio,
       d.logp_behavior, d.logp_train, d.d_pre, d.delta, d.d_local, d.d_predictive, d.d_exact,
       d.keep_ratio, d.keep_predictive, d.kept_by,
       p.d_post_ratio, p.delta_d_ratio, p.d_post_predictive, p.delta_d_predictive,
       p.delta_d_none, p.logp_post_ratio, p.logp_post_predictive,
       CASE d.kept_by WHEN 'ratio' THEN p.delta_d_ratio ELSE p.delta_d_predictive END
           AS delta_d_kept
FROM d
LEFT JOIN post AS p
  ON p.seed IS NOT DISTINCT FROM d.seed AND p.family = d.family
 AND p.estimator = d.estimator AND p.sample_id = d.sample_id AND p.pos = d.pos;

CREATE OR REPLACE VIEW disagreements AS
SELECT * FROM disagreements_live;

-- Per seed, family, estimator and update mask (= the mask whose own update is measured):
-- unsafe keep rate = n_unsafe / n_measured, corrective rate = n_corrective / n_measured,
-- over disagreement tokens kept by that mask (n_measured: those with an update row).
CREATE OR REPLACE VIEW alignment_by_seed AS
WITH oor AS (
    SELECT seed, family, count(*) AS n_out_of_region FROM out_of_region GROUP BY seed, family
),
grid AS (
    SELECT s.seed, p.family, p.estimator, x.direction,
           CASE x.direction WHEN 'ratio' THEN p.ratio_mask ELSE p.predictive_mask END
               AS update_mask
    FROM seeds AS s
    CROSS JOIN mask_pairs AS p
    CROSS JOIN (VALUES ('ratio'), ('predictive')) AS x(direction)
    WHERE p.present
),
kept AS (
    SELECT seed, family, estimator, kept_by AS direction,
           count(*) AS n_kept,
           count(delta_d_kept) AS n_measured,
           count(*) FILTER (WHERE delta_d_kept > 0) AS n_unsafe,
           count(*) FILTER (WHERE delta_d_kept < 0) AS n_corrective
    FROM disagreements
    GROUP BY seed, family, estimator, kept_by
)
SELECT g.seed, g.family, g.estimator, g.direction, g.update_mask,
       coalesce(o.n_out_of_region, 0) AS n_out_of_region,
       CAST(coalesce(sum(k.n_kept) OVER (PARTITION BY g.seed, g.family, g.estimator), 0)
            AS BIGINT) AS n_disagree,
       coalesce(k.n_kept, 0) AS n_kept,
       coalesce(k.n_measured, 0) AS n_measured,
       coalesce(k.n_unsafe, 0) AS n_unsafe,
       coalesce(k.n_corrective, 0) AS n_corrective,
       k.n_unsafe / nullif(k.n_measured, 0) AS unsafe_keep_rate,
       k.n_corrective / nullif(k.n_measured, 0) AS corrective_rate
FROM grid AS g
LEFT JOIN oor AS o ON o.seed IS NOT DISTINCT FROM g.seed AND o.family = g.family
LEFT JOIN kept AS k
  ON k.seed IS NOT DISTINCT FROM g.seed AND k.family = g.family
 AND k.estimator = g.estimator AND k.direction = g.direction;

-- Per seed: unsafe keep and corrective rates of the ratio and the predictive mask side by
-- side. unsafe_diff = ratio - predictive, so a win (predictive lower) is unsafe_diff > 0.
CREATE OR REPLACE VIEW seed_wins AS
SELECT seed, family, estimator,
       any_value(n_out_of_region) AS n_out_of_region,
       any_value(n_disagree) AS n_disagree,
       any_value(unsafe_keep_rate) FILTER (WHERE direction = 'ratio') AS unsafe_ratio,
       any_value(unsafe_keep_rate) FILTER (WHERE direction = 'predictive')
           AS unsafe_predictive,
       any_value(corrective_rate) FILTER (WHERE direction = 'ratio') AS corrective_ratio,
       any_value(corrective_rate) FILTER (WHERE direction = 'predictive')
           AS corrective_predictive,
       unsafe_ratio - unsafe_predictive AS unsafe_diff,
       CASE WHEN unsafe_diff > 0 THEN 'win'
            WHEN unsafe_diff < 0 THEN 'loss'
            WHEN unsafe_diff = 0 THEN 'tie' END AS outcome
FROM alignment_by_seed
GROUP BY seed, family, estimator;
