-- Queries of pdm_replay.report.certificate_report, one per "-- name:" block.

-- name: certificate_summary
-- Out-of-region KL tokens (kl_topk > delta_kl) and the disagreement tokens of each KL
-- pair of the registry (view kl_pair_disagreements, one scope per pair in registry order):
-- how many the log-only sign certificate decides (away / toward) and how many stay
-- uncertain, and how often each slope estimate lies inside the feasible interval
-- [dkl_lo, dkl_hi] (exact: up to $tol, as logged µ are rounded by the engine).
WITH o AS (
    SELECT seed, sample_id, pos, direction_certified AS cert, dkl_lo, dkl_hi, dkl_agg,
           dkl_uniform, dkl_exact
    FROM tokens
    WHERE kl_topk > getvariable('report_run').delta_kl AND direction_certified IS NOT NULL
), scoped AS (
    SELECT 'out_of_region' AS scope, -1 AS ord, o.* FROM o
    UNION ALL
    SELECT d.scope, d.pair_ord, o.*
    FROM o
    JOIN kl_pair_disagreements AS d
      ON d.seed IS NOT DISTINCT FROM o.seed AND d.sample_id = o.sample_id AND d.pos = o.pos
)
SELECT scope,
       count(*) AS n_tokens,
       count(*) FILTER (WHERE cert = 'away') AS n_away,
       count(*) FILTER (WHERE cert = 'toward') AS n_toward,
       count(*) FILTER (WHERE cert = 'uncertain') AS n_uncertain,
       count(*) FILTER (WHERE cert = 'uncertain') / count(*) AS uncertain_share,
       avg(CAST(dkl_agg BETWEEN dkl_lo AND dkl_hi AS DOUBLE)) AS agg_inside_share,
       avg(CAST(dkl_uniform BETWEEN dkl_lo AND dkl_hi AS DOUBLE)) AS uniform_inside_share,
       avg(CAST(dkl_exact BETWEEN dkl_lo - $tol AND dkl_hi + $tol AS DOUBLE))
           AS exact_inside_share
FROM scoped
GROUP BY scope
ORDER BY min(ord);
