-- How well each direction predictor foresees the realized change (SPEC §6).

-- Out-of-region tokens with a gradient (advantage <> 0) and their realized Delta D under
-- each single update every token sees the same way: the simulated `none` (every token kept)
-- and the trainer's real step `actual` (bases, where the run holds them).
CREATE OR REPLACE VIEW realized AS
SELECT o.*, b.basis, b.basis_ord,
       CASE o.family WHEN 'kl' THEN u.delta_kl_topk ELSE u.delta_tv_topk END AS delta_d
FROM out_of_region AS o
JOIN bases AS b ON b.basis IN (getvariable('report_run').none, getvariable('report_run').actual)
JOIN updates AS u
  ON u.seed = o.seed AND u.sample_id = o.sample_id AND u.pos = o.pos
 AND u.update_mask = b.basis
WHERE o.advantage <> 0;

CREATE OR REPLACE VIEW realized_none AS
SELECT * EXCLUDE (basis, basis_ord) FROM realized WHERE basis = getvariable('report_run').none;

-- Sign accuracy per basis, seed, family, region (of a comparison), delta and predictor:
-- the fraction of tokens where sign(predicted) = sign(Delta D). Predicted: ratio
-- sign(A)(r - 1), predictive sign(A) * D-dot (agg / uniform tail) and, where the run has
-- it, the exact D-dot. A zero on either side counts as a miss.
CREATE OR REPLACE VIEW sign_accuracy AS
WITH p AS (
    SELECT r.basis, r.basis_ord, r.seed, r.family, r.region, r.delta, x.predictor, x.ord,
           sign(r.advantage) * CASE x.predictor
               WHEN 'ratio' THEN r.ratio - 1
               WHEN 'predictive_agg' THEN r.d_agg
               WHEN 'predictive_uniform' THEN r.d_uniform
               ELSE r.d_exact END AS predicted,
           r.delta_d
    FROM realized AS r
    CROSS JOIN (VALUES (1, 'ratio'), (2, 'predictive_agg'), (3, 'predictive_uniform'),
                       (4, 'predictive_exact')) AS x(ord, predictor)
)
SELECT basis, seed, family, region, delta, predictor,
       count(*) AS n_tokens,
       count(*) FILTER (WHERE sign(predicted) = sign(delta_d)) AS n_correct,
       n_correct / n_tokens AS accuracy,
       min(ord) AS ord, min(basis_ord) AS basis_ord
FROM p
WHERE predicted IS NOT NULL AND delta_d IS NOT NULL
GROUP BY basis, seed, family, region, delta, predictor;

-- Top-K estimators of the KL slope against the exact slope dkl_exact of a replay with a
-- behavior checkpoint. "Exact" uses the reloaded behavior checkpoint's µ, not the logged
-- µ (their gap: behavior_fidelity), so the error mixes the tail model's error with that
-- mismatch. Scopes: all tokens, out-of-region ones (per region) and the disagreement tokens
-- of the estimator's own comparison (where the direction decision is at stake).
CREATE OR REPLACE VIEW estimator_accuracy AS
WITH e AS (
    SELECT 'all' AS scope, CAST(NULL AS VARCHAR) AS region, CAST(NULL AS DOUBLE) AS delta,
           x.estimator,
           CASE x.estimator WHEN 'agg' THEN t.dkl_agg ELSE t.dkl_uniform END AS estimate,
           t.dkl_exact AS exact
    FROM tokens AS t
    CROSS JOIN (VALUES ('agg'), ('uniform')) AS x(estimator)
    WHERE t.dkl_exact IS NOT NULL
    UNION ALL
    SELECT 'out_of_region', o.region, o.delta, x.estimator,
           CASE x.estimator WHEN 'agg' THEN o.d_agg ELSE o.d_uniform END, o.d_exact
    FROM out_of_region AS o
    CROSS JOIN (VALUES ('agg'), ('uniform')) AS x(estimator)
    WHERE o.family = 'kl' AND o.d_exact IS NOT NULL
    UNION ALL
    SELECT 'disagreement', d.region, d.delta, d.estimator, d.d_predictive, d.d_exact
    FROM disagreements AS d
    WHERE d.family = 'kl' AND d.d_exact IS NOT NULL
)
SELECT 'kl' AS family, estimator, scope, region, delta,
       count(*) AS n_tokens,
       avg(CAST(sign(estimate) = sign(exact) AS DOUBLE)) AS sign_agreement,
       avg(abs(estimate - exact)) AS mean_abs_error,
       max(abs(estimate - exact)) AS max_abs_error,
       avg(abs(exact)) AS mean_abs_exact
FROM e
GROUP BY estimator, scope, region, delta;

-- Logged vs reloaded µ (replay with a behavior checkpoint): |behavior_logp_gap| at the
-- sampled token and behavior_logp_gap_max over the support, beside one rounding of the
-- logged log-prob in the behavior dtype ($unit_roundoff * |logp_behavior|, u from the
-- manifest's behavior_fidelity), over all tokens and the disagreement tokens.
CREATE OR REPLACE MACRO behavior_fidelity(unit_roundoff) AS TABLE
WITH g AS (
    SELECT 'all' AS scope, t.behavior_logp_gap AS gap, t.behavior_logp_gap_max AS gap_max,
           t.logp_behavior
    FROM tokens AS t WHERE t.behavior_logp_gap IS NOT NULL
    UNION ALL
    SELECT 'disagreement', t.behavior_logp_gap, t.behavior_logp_gap_max, t.logp_behavior
    FROM tokens AS t
    SEMI JOIN disagreements AS d
      ON d.seed IS NOT DISTINCT FROM t.seed AND d.sample_id = t.sample_id AND d.pos = t.pos
    WHERE t.behavior_logp_gap IS NOT NULL
)
SELECT scope, count(*) AS n_tokens,
       median(abs(gap)) AS median_abs_gap,
       quantile_cont(abs(gap), 0.99) AS p99_abs_gap,
       max(abs(gap)) AS max_abs_gap,
       max(gap_max) AS max_support_gap,
       avg(CAST(abs(gap) <= unit_roundoff * abs(logp_behavior) AS DOUBLE))
           AS within_one_rounding
FROM g
GROUP BY scope
ORDER BY scope;

-- Local and global terms of the KL slope on out-of-region tokens, signed by sign(A) so that
-- the predictive rule reads "moves away iff local_term - global_term > 0" and the ratio rule
-- "iff local_term > 0". global_term = d_local - d_agg (SPEC §3). The region: that of the
-- first KL comparison (registry order, smallest threshold).
CREATE OR REPLACE VIEW direction_terms AS
SELECT o.seed, o.sample_id, o.pos,
       sign(o.advantage) * o.d_local AS local_term,
       sign(o.advantage) * (o.d_local - o.d_agg) AS global_term,
       sign(o.advantage) * o.d_agg AS predicted,
       u.delta_kl_topk AS delta_d_none
FROM out_of_region AS o
LEFT JOIN updates AS u
  ON u.seed = o.seed AND u.sample_id = o.sample_id AND u.pos = o.pos
 AND u.update_mask = getvariable('report_run').none
WHERE o.family = 'kl' AND o.advantage <> 0
  AND o.region = (SELECT region FROM comparisons WHERE family = 'kl' ORDER BY ord LIMIT 1)
  AND o.delta = (SELECT delta FROM comparisons WHERE family = 'kl' ORDER BY ord LIMIT 1);
