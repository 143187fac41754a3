-- First-order attribution of the realized Delta D_kl (replay --attribution, issue 9 §2):
-- why a direction predictor's sign was wrong on an out-of-region KL token.
--
-- Per token, a chain of four signs of the change of D_kl under one update:
--   predicted  sign(A) * slope of the predictor (logit space: ratio r - 1, dkl_agg, ...)
--   self       delta_kl_self: the token's own gradient's first-order effect, in parameter
--              space (SGD replays only, on the attribution sample: null elsewhere)
--   linear     delta_kl_lin: every kept token's gradient, first order
--   realized   delta_kl_topk
-- A wrong prediction (predicted <> realized; a zero on either side is wrong, as in
-- sign_accuracy) flips sign at least once along the chain, at one or more stages:
--   geometry      self <> predicted   (the logit Gram matrix J J^T is not ~ I)
--   interference  linear <> self      (the other tokens' gradients)
--   curvature     realized <> linear  (second and higher order)
-- Without the self term the first two merge: parameter_space = linear <> predicted.

-- Out-of-region KL tokens with a gradient (A <> 0), under every update that kept them and
-- whose attribution was computed. disagreement: some KL pair of the registry decided the
-- token differently (view pair_disagreements, family kl).
CREATE OR REPLACE VIEW attribution_tokens AS
WITH dis AS (
    SELECT DISTINCT seed, sample_id, pos FROM pair_disagreements WHERE family = 'kl'
)
SELECT t.seed, t.sample_id, t.pos, u.update_mask,
       d.pos IS NOT NULL AS disagreement,
       t.advantage, t.ratio, t.kl_topk AS d_pre, t.dkl_agg, t.dkl_uniform, t.dkl_exact,
       u.delta_kl_topk AS delta_d, u.delta_kl_lin AS lin, u.delta_kl_curv AS curv,
       u.delta_kl_self AS self_term, u.delta_kl_cross AS cross_term
FROM tokens AS t
JOIN updates AS u
  ON u.seed = t.seed AND u.sample_id = t.sample_id AND u.pos = t.pos
LEFT JOIN dis AS d
  ON d.seed IS NOT DISTINCT FROM t.seed AND d.sample_id = t.sample_id AND d.pos = t.pos
WHERE t.kl_topk > getvariable('report_run').delta_kl
  AND t.advantage <> 0
  AND u.kept
  AND u.delta_kl_lin IS NOT NULL;

-- The four signs per token and predictor (predictive_exact only where dkl_exact exists).
CREATE OR REPLACE VIEW attribution_signs AS
SELECT *
FROM (
    SELECT a.seed, a.sample_id, a.pos, a.update_mask, a.disagreement, x.predictor, x.ord,
           sign(sign(a.advantage) * CASE x.predictor
               WHEN 'ratio' THEN a.ratio - 1
               WHEN 'predictive_agg' THEN a.dkl_agg
               WHEN 'predictive_uniform' THEN a.dkl_uniform
               ELSE a.dkl_exact END) AS s_pred,
           sign(a.self_term) AS s_self, sign(a.lin) AS s_lin, sign(a.delta_d) AS s_real
    FROM attribution_tokens AS a
    CROSS JOIN (VALUES (1, 'ratio'), (2, 'predictive_agg'), (3, 'predictive_uniform'),
                       (4, 'predictive_exact')) AS x(ord, predictor)
)
WHERE s_pred IS NOT NULL AND s_real IS NOT NULL;

-- Error counts per seed, update mask, scope (all out-of-region tokens, or the
-- disagreement ones) and predictor. n_geometry, n_interference, n_curvature count errors
-- with a self term (n_errors_self); an error flips at one stage or at all three
-- (n_all_three), so the three counts sum to n_errors_self + 2 * n_all_three.
CREATE OR REPLACE VIEW attribution_split_by_seed AS
WITH s AS (
    SELECT g.*, g.s_pred <> g.s_real AS err, sc.scope, sc.scope_ord
    FROM attribution_signs AS g
    CROSS JOIN (VALUES (1, 'out_of_region'), (2, 'disagreement')) AS sc(scope_ord, scope)
    WHERE sc.scope = 'out_of_region' OR g.disagreement
)
SELECT seed, update_mask, scope, predictor,
       count(*) AS n_tokens,
       count(*) FILTER (WHERE err) AS n_errors,
       count(*) FILTER (WHERE err AND s_self IS NOT NULL) AS n_errors_self,
       count(*) FILTER (WHERE err AND s_self <> s_pred) AS n_geometry,
       count(*) FILTER (WHERE err AND s_lin <> s_self) AS n_interference,
       count(*) FILTER (WHERE err AND s_self IS NOT NULL AND s_real <> s_lin) AS n_curvature,
       count(*) FILTER (WHERE err AND s_self <> s_pred AND s_lin <> s_self
                        AND s_real <> s_lin) AS n_all_three,
       count(*) FILTER (WHERE err AND s_lin <> s_pred) AS n_parameter_space,
       count(*) FILTER (WHERE err AND s_real <> s_lin) AS n_curvature_all,
       min(scope_ord) AS scope_ord, min(ord) AS ord
FROM s
GROUP BY seed, update_mask, scope, predictor;
