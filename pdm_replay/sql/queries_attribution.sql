-- Queries of pdm_replay.report.attribution_report, one per "-- name:" block ($parameters only).
-- Views: views_attribution.sql.

-- name: attribution_split
-- Pooled over seeds. Shares of the errors with a self term: geometry / interference /
-- curvature (they overlap where all three stages flip); of all errors: parameter_space
-- (linear sign <> predicted) and curvature_all (realized <> linear).
SELECT update_mask, scope, predictor,
       count(DISTINCT seed) AS n_seeds,
       CAST(sum(n_tokens) AS BIGINT) AS n_tokens,
       CAST(sum(n_errors) AS BIGINT) AS n_errors,
       1 - sum(n_errors) / sum(n_tokens) AS accuracy,
       CAST(sum(n_errors_self) AS BIGINT) AS n_errors_self,
       CAST(sum(n_geometry) AS BIGINT) AS n_geometry,
       CAST(sum(n_interference) AS BIGINT) AS n_interference,
       CAST(sum(n_curvature) AS BIGINT) AS n_curvature,
       CAST(sum(n_all_three) AS BIGINT) AS n_all_three,
       sum(n_geometry) / nullif(sum(n_errors_self), 0) AS geometry_share,
       sum(n_interference) / nullif(sum(n_errors_self), 0) AS interference_share,
       sum(n_curvature) / nullif(sum(n_errors_self), 0) AS curvature_share,
       CAST(sum(n_parameter_space) AS BIGINT) AS n_parameter_space,
       CAST(sum(n_curvature_all) AS BIGINT) AS n_curvature_all,
       sum(n_parameter_space) / nullif(sum(n_errors), 0) AS parameter_space_share,
       sum(n_curvature_all) / nullif(sum(n_errors), 0) AS curvature_all_share
FROM attribution_split_by_seed
WHERE update_mask = $update_mask
GROUP BY update_mask, scope, predictor
ORDER BY min(scope_ord), min(ord);

-- name: attribution_split_by_seed
SELECT * EXCLUDE (scope_ord, ord) FROM attribution_split_by_seed
WHERE update_mask = $update_mask
ORDER BY seed, scope_ord, ord;

-- name: attribution_points
-- Per token: realized change and its parts, for plots. A deterministic pseudo-random
-- sample (by a hash of the token key) of at most $limit rows.
SELECT seed, sample_id, pos, update_mask, disagreement, advantage, ratio, d_pre,
       dkl_agg, dkl_uniform, delta_d, lin, curv, self_term, cross_term
FROM attribution_tokens
WHERE update_mask = $update_mask
ORDER BY hash(seed, sample_id, pos), seed, sample_id, pos
LIMIT $limit;

-- name: attribution_coverage
-- Per update mask: updates rows, and how many carry each attribution column.
SELECT update_mask,
       count(*) AS n_rows,
       count(delta_kl_lin) AS n_linear,
       count(delta_kl_self) AS n_self,
       avg(abs(delta_kl_curv)) / nullif(avg(abs(delta_kl_lin)), 0) AS curvature_ratio
FROM updates
GROUP BY update_mask
ORDER BY update_mask;
