-- Queries of pdm_replay.report.certificate_report, one per "-- name:" block.

-- name: certificate_summary
-- Out-of-region KL tokens (kl_topk > delta_kl, the certified mask's region) and the
-- disagreement tokens of each KL pair of the registry, each outside its own pair's region
-- (view pair_disagreements, one scope per pair in registry order):
-- how many the log-only sign certificate decides (away / toward) and how many stay
-- uncertain, and how often each slope estimate lies inside the feasible interval
-- [dkl_lo, dkl_hi] (exact: up to $tol, as logged µ are rounded by the engine).
WITH c AS (
    SELECT seed, sample_id, pos, direction_certified AS cert, dkl_lo, dkl_hi, dkl_agg,
           dkl_uniform, dkl_exact, kl_topk
    FROM tokens
    WHERE direction_certified IS NOT NULL
), scoped AS (
    SELECT 'out_of_region' AS scope, -1 AS ord, c.* FROM c
    WHERE c.kl_topk > getvariable('report_run').delta_kl
    UNION ALL
    SELECT d.scope, d.pair_ord, c.*
    FROM c
    JOIN pair_disagreements AS d
      ON d.seed IS NOT DISTINCT FROM c.seed AND d.sample_id = c.sample_id AND d.pos = c.pos
    WHERE d.family = 'kl'
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
