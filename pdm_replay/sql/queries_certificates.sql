-- Queries of pdm_replay.report.certificates, one per "-- name:" block.

-- name: certificate_summary
-- Out-of-region KL tokens (kl_topk > delta_kl) and the disagreement tokens of each KL
-- pair: how many the log-only sign certificate decides (away / toward) and how many stay
-- uncertain, and how often each slope estimate lies inside the feasible interval
-- [dkl_lo, dkl_hi] (exact: up to $tol, as logged µ are rounded by the engine).
WITH o AS (
    SELECT direction_certified AS cert, dkl_lo, dkl_hi, dkl_agg, dkl_uniform, dkl_exact,
           keep_dppo_topk_kl <> keep_pdm_kl_agg AS dis_agg,
           keep_dppo_topk_kl <> keep_pdm_kl_uniform AS dis_uniform
    FROM tokens
    WHERE kl_topk > getvariable('report_run').delta_kl AND direction_certified IS NOT NULL
), scoped AS (
    SELECT 'out_of_region' AS scope, 1 AS ord, * FROM o
    UNION ALL SELECT 'disagreement_agg', 2, * FROM o WHERE dis_agg
    UNION ALL SELECT 'disagreement_uniform', 3, * FROM o WHERE dis_uniform
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
