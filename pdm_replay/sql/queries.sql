-- Queries of the Python API (pdm_replay.report.api), one per "-- name:" block.
-- Values arrive only as $parameters.

-- name: settings
SELECT * FROM settings;

-- name: mask_summary
SELECT * EXCLUDE (ord) FROM mask_summary ORDER BY ord NULLS LAST, mask;

-- name: mask_summary_by_seed
SELECT * EXCLUDE (ord) FROM mask_summary_by_seed ORDER BY seed, ord NULLS LAST, mask;

-- name: disagreements
SELECT *
FROM disagreements
WHERE ($pair IS NULL OR pair = $pair)
  AND ($family IS NULL OR family = $family)
  AND ($estimator IS NULL OR estimator = $estimator)
  AND ($seed IS NULL OR seed = $seed)
ORDER BY seed, family, estimator, pair, sample_id, pos
LIMIT $limit OFFSET $offset;

-- name: alignment_by_seed
SELECT * EXCLUDE (basis_ord, ord) FROM alignment_by_seed
ORDER BY basis_ord, seed, ord, direction DESC;

-- name: alignment
-- Pooled over seeds: rates are sums of counts over sums of measured tokens.
SELECT basis, pair, family, estimator, region, delta, direction, update_mask,
       count(*) AS n_seeds,
       CAST(sum(n_out_of_region) AS BIGINT) AS n_out_of_region,
       CAST(sum(n_disagree) AS BIGINT) AS n_disagree,
       CAST(sum(n_kept) AS BIGINT) AS n_kept,
       CAST(sum(n_measured) AS BIGINT) AS n_measured,
       CAST(sum(n_unsafe) AS BIGINT) AS n_unsafe,
       CAST(sum(n_corrective) AS BIGINT) AS n_corrective,
       sum(n_unsafe) / nullif(sum(n_measured), 0) AS unsafe_keep_rate,
       sum(n_corrective) / nullif(sum(n_measured), 0) AS corrective_rate
FROM alignment_by_seed
GROUP BY basis, pair, family, estimator, region, delta, direction, update_mask
ORDER BY min(basis_ord), min(ord), direction DESC;

-- name: seed_rates
SELECT * EXCLUDE (basis_ord, ord) FROM seed_rates
ORDER BY basis_ord, ord, seed;

-- name: cluster_counts
SELECT * FROM cluster_counts
ORDER BY basis, pair, delta, sample_id, seed, direction;

-- name: n_samples
-- Distinct samples of the run: the clusters of the bootstrap (with or without tokens in
-- the disagreement set).
SELECT count(DISTINCT sample_id) AS n FROM tokens;

-- name: shared_samples
-- Samples whose tokens are in more than one seed (seeds that overlap are not independent).
SELECT count(*) AS n FROM (
    SELECT sample_id FROM tokens WHERE seed IS NOT NULL
    GROUP BY sample_id HAVING count(DISTINCT seed) > 1
);

-- name: behavior_fidelity
SELECT * FROM behavior_fidelity($unit_roundoff);

-- name: sign_accuracy
SELECT basis, family, region, delta, predictor,
       CAST(sum(n_tokens) AS BIGINT) AS n_tokens,
       CAST(sum(n_correct) AS BIGINT) AS n_correct,
       sum(n_correct) / sum(n_tokens) AS accuracy
FROM sign_accuracy
GROUP BY basis, family, region, delta, predictor
ORDER BY min(basis_ord), family, delta, region, min(ord);

-- name: sign_accuracy_by_seed
SELECT * EXCLUDE (ord, basis_ord) FROM sign_accuracy
ORDER BY basis_ord, seed, family, delta, region, ord;

-- name: estimator_accuracy
SELECT * FROM estimator_accuracy
ORDER BY family, estimator, CASE scope WHEN 'all' THEN 0 WHEN 'out_of_region' THEN 1
                                       ELSE 2 END, delta NULLS FIRST, region NULLS FIRST;

-- name: log_health
SELECT * FROM log_health;

-- name: direction_terms
-- A deterministic pseudo-random subset (by a hash of the token key) of at most $limit rows.
SELECT * FROM direction_terms
ORDER BY hash(seed, sample_id, pos), seed, sample_id, pos
LIMIT $limit;

-- name: kept_deltas
SELECT seed, pair, family, estimator, region, delta, kept_by,
       CASE kept_by WHEN 'ratio' THEN ratio_update ELSE predictive_update END AS update_mask,
       delta_d_kept
FROM disagreements
WHERE delta_d_kept IS NOT NULL
ORDER BY family, estimator, pair, seed, sample_id, pos;

-- name: report_step
-- The one logged step a connection keeps (report --by step), NULL for the whole run.
SELECT getvariable('report_run').step AS step;
