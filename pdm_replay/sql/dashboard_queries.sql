-- Queries of the dashboard (pdm_replay.report.dashboard_api), one per "-- name:" block.
-- Values arrive only as $parameters; dashboard_macros.sql defines the table macros.

-- name: seeds
SELECT seed FROM seeds ORDER BY seed NULLS FIRST;

-- name: disagreement_count
SELECT count(*) AS n
FROM dashboard_disagreements($pair, $family, $estimator, $seed, $update, $kept_by,
                             $adv_sign, $delta_sign);

-- name: disagreement_page
-- One page, sorted by $sort (a column name below; anything else: the key order seed,
-- family, estimator, pair, sample_id, pos), descending when $descending.
SELECT seed, pair, family, estimator, region, sample_id, pos, token_id, kept_by,
       update_mask, advantage,
       ratio, d_pre, delta, d_local, d_predictive, d_exact, delta_d,
       delta_d_ratio, delta_d_predictive, delta_d_none, delta_d_actual, keep_ratio,
       keep_predictive, ratio_mask, predictive_mask, ratio_update, predictive_update, step
FROM (
    SELECT *,
           CASE $sort WHEN 'd_pre' THEN d_pre
                      WHEN 'delta_d' THEN delta_d
                      WHEN 'advantage' THEN advantage
                      WHEN 'ratio' THEN ratio
                      WHEN 'd_local' THEN d_local
                      WHEN 'd_predictive' THEN d_predictive END AS sort_value
    FROM dashboard_disagreements($pair, $family, $estimator, $seed, $update, $kept_by,
                                 $adv_sign, $delta_sign)
)
ORDER BY CASE WHEN $descending THEN -sort_value ELSE sort_value END NULLS LAST,
         seed, family, estimator, pair, sample_id, pos
LIMIT $limit OFFSET $offset;

-- name: token_row
SELECT * FROM tokens
WHERE seed IS NOT DISTINCT FROM $seed AND sample_id = $sample_id AND pos = $pos
LIMIT 1;

-- name: token_updates
SELECT update_mask, kept, logp_post, kl_topk_post, tv_topk_post, delta_kl_topk,
       delta_tv_topk, delta_logp, kl_exact_post, delta_kl_exact
FROM updates
WHERE seed IS NOT DISTINCT FROM $seed AND sample_id = $sample_id AND pos = $pos
ORDER BY update_mask;

-- name: token_support
-- µ and π_pre over the support S (lists in support order, first = k) and both tails;
-- the lists are null for runs written before they existed.
SELECT support_ids, support_logp_behavior, support_logp_pre, mu_tail, pi_tail FROM tokens
WHERE seed IS NOT DISTINCT FROM $seed AND sample_id = $sample_id AND pos = $pos
LIMIT 1;

-- name: token_support_post
-- π_post over S (same order as support_ids), one row per simulated update mask.
SELECT update_mask, support_logp_post FROM updates
WHERE seed IS NOT DISTINCT FROM $seed AND sample_id = $sample_id AND pos = $pos
  AND support_logp_post IS NOT NULL
ORDER BY update_mask;

-- name: response_tokens
SELECT pos, token_id FROM tokens
WHERE seed IS NOT DISTINCT FROM $seed AND sample_id = $sample_id
  AND pos BETWEEN $first AND $last
ORDER BY pos;

-- name: value_histogram
-- $bins equal-width bins of the column (of log10 of it when $log, floored at 1e-12) between
-- its minimum and maximum; bins without tokens are left out.
WITH x AS (
    SELECT CASE WHEN $log THEN log10(greatest(v, 1e-12)) ELSE v END AS x
    FROM dashboard_values($column)
    WHERE v IS NOT NULL AND isfinite(v)
),
r AS (
    SELECT min(x) AS lo, greatest(max(x) - min(x), 1e-9) / $bins AS width FROM x
),
b AS (
    SELECT least(CAST(floor((x.x - r.lo) / r.width) AS BIGINT), $bins - 1) AS bin,
           count(*) AS n
    FROM x, r
    GROUP BY bin
)
SELECT b.bin, r.lo + b.bin * r.width AS x_lo, r.lo + (b.bin + 1) * r.width AS x_hi, b.n
FROM b, r
ORDER BY b.bin;

-- name: mass_quantiles
-- Top-K mass of the behavior (mu_mass = 1 - mu_tail) and training (pi_mass) distributions.
SELECT 'mu_mass' AS distribution, count(v) AS n_tokens, min(v) AS min,
       quantile_cont(v, 0.01) AS p1, quantile_cont(v, 0.05) AS p5,
       quantile_cont(v, 0.5) AS p50, quantile_cont(v, 0.95) AS p95, max(v) AS max,
       avg(v) AS mean
FROM dashboard_values('mu_mass')
UNION ALL
SELECT 'pi_mass', count(v), min(v), quantile_cont(v, 0.01), quantile_cont(v, 0.05),
       quantile_cont(v, 0.5), quantile_cont(v, 0.95), max(v), avg(v)
FROM dashboard_values('pi_mass');

-- name: estimator_sample
-- A deterministic pseudo-random subset (hash of the token key) of at most $limit tokens.
SELECT seed, sample_id, pos, kl_topk, dkl_agg, dkl_uniform, dkl_exact, dkl_lo, dkl_hi,
       kl_topk > getvariable('report_run').delta_kl AS out_of_region
FROM tokens
ORDER BY hash(seed, sample_id, pos), seed, sample_id, pos
LIMIT $limit;
