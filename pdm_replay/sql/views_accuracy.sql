-- How well each direction predictor foresees the realized change (SPEC §6).

-- Out-of-region tokens with a gradient (advantage <> 0) and their realized Delta D under the
-- reference update `none` (every token kept).
CREATE OR REPLACE VIEW realized_none AS
SELECT o.*,
       CASE o.family WHEN 'kl' THEN u.delta_kl_topk ELSE u.delta_tv_topk END AS delta_d
FROM out_of_region AS o
JOIN updates AS u
  ON u.seed = o.seed AND u.sample_id = o.sample_id AND u.pos = o.pos
WHERE u.update_mask = 'none' AND o.advantage <> 0;

-- Sign accuracy per seed, family and predictor: the fraction of tokens where
-- sign(predicted) = sign(Delta D). Predicted: ratio sign(A)(r - 1), predictive
-- sign(A) * D-dot (agg / uniform tail) and, where the run has it, the exact D-dot.
-- A zero on either side counts as a miss.
CREATE OR REPLACE VIEW sign_accuracy AS
WITH p AS (
    SELECT r.seed, r.family, x.predictor, x.ord,
           sign(r.advantage) * CASE x.predictor
               WHEN 'ratio' THEN r.ratio - 1
               WHEN 'predictive_agg' THEN r.d_agg
               WHEN 'predictive_uniform' THEN r.d_uniform
               ELSE r.d_exact END AS predicted,
           r.delta_d
    FROM realized_none AS r
    CROSS JOIN (VALUES (1, 'ratio'), (2, 'predictive_agg'), (3, 'predictive_uniform'),
                       (4, 'predictive_exact')) AS x(ord, predictor)
)
SELECT seed, family, predictor,
       count(*) AS n_tokens,
       count(*) FILTER (WHERE sign(predicted) = sign(delta_d)) AS n_correct,
       n_correct / n_tokens AS accuracy,
       min(ord) AS ord
FROM p
WHERE predicted IS NOT NULL AND delta_d IS NOT NULL
GROUP BY seed, family, predictor;

-- Top-K estimators of the KL slope against the exact slope (replay with a behaviour
-- checkpoint: dkl_exact), over all tokens and over the out-of-region ones.
CREATE OR REPLACE VIEW estimator_accuracy AS
WITH e AS (
    SELECT s.scope, x.estimator,
           CASE x.estimator WHEN 'agg' THEN t.dkl_agg ELSE t.dkl_uniform END AS estimate,
           t.dkl_exact AS exact
    FROM tokens AS t
    CROSS JOIN (VALUES ('agg'), ('uniform')) AS x(estimator)
    CROSS JOIN (VALUES ('all'), ('out_of_region')) AS s(scope)
    WHERE t.dkl_exact IS NOT NULL
      AND (s.scope = 'all' OR t.kl_topk > getvariable('report_run').delta_kl)
)
SELECT 'kl' AS family, estimator, scope,
       count(*) AS n_tokens,
       avg(CAST(sign(estimate) = sign(exact) AS DOUBLE)) AS sign_agreement,
       avg(abs(estimate - exact)) AS mean_abs_error,
       max(abs(estimate - exact)) AS max_abs_error,
       avg(abs(exact)) AS mean_abs_exact
FROM e
GROUP BY estimator, scope;

-- Local and global terms of the KL slope on out-of-region tokens, signed by sign(A) so that
-- the predictive rule reads "moves away iff local_term - global_term > 0" and the ratio rule
-- "iff local_term > 0". global_term = d_local - d_agg (SPEC §3).
CREATE OR REPLACE VIEW direction_terms AS
SELECT o.seed, o.sample_id, o.pos,
       sign(o.advantage) * o.d_local AS local_term,
       sign(o.advantage) * (o.d_local - o.d_agg) AS global_term,
       sign(o.advantage) * o.d_agg AS predicted,
       u.delta_kl_topk AS delta_d_none
FROM out_of_region AS o
LEFT JOIN updates AS u
  ON u.seed = o.seed AND u.sample_id = o.sample_id AND u.pos = o.pos
 AND u.update_mask = 'none'
WHERE o.family = 'kl' AND o.advantage <> 0;
