-- Mask decisions and log health.

-- Keep counts per seed and mask: one column per keep_<mask> present in the run (masks the
-- run lacks are NULL in `tokens` and dropped by UNPIVOT).
CREATE OR REPLACE VIEW mask_summary_by_seed AS
WITH counts AS (
    UNPIVOT (
        SELECT seed,
               count(*) AS n_tokens,
               sum(CAST(COLUMNS('^keep_') AS BIGINT))
        FROM tokens
        GROUP BY seed
    ) ON COLUMNS('^keep_') INTO NAME keep_column VALUE n_kept
),
-- Tokens outside each family mask's own region (table masks: stat, low, high from the
-- registry's criterion at the run's thresholds, those the keep_<mask> columns were
-- written at; NaN is never outside).
outside AS (
    SELECT v.seed, m.name, count(*) AS n_out_of_region
    FROM (
        UNPIVOT (
            SELECT seed,
                   COLUMNS(getvariable('report_regions').stat_columns) AS 'region_stat:\1'
            FROM tokens
        ) ON COLUMNS('^region_stat:') INTO NAME stat_column VALUE stat_value
    ) AS v
    JOIN masks AS m ON v.stat_column = 'region_stat:' || m.stat
    WHERE NOT isnan(v.stat_value) AND NOT (v.stat_value BETWEEN m.low AND m.high)
    GROUP BY ALL
)
-- A sweep variant <mask>@<value> (table mask_variants) takes its mask's labels; its
-- out-of-region count is left NULL (the regions above are at the primary thresholds).
SELECT c.seed,
       substr(c.keep_column, 6) AS mask,
       m.family, m.direction, m.estimator,
       c.n_tokens,
       CAST(c.n_kept AS BIGINT) AS n_kept,
       CAST(c.n_tokens - c.n_kept AS BIGINT) AS n_masked,
       c.n_kept / c.n_tokens AS keep_fraction,
       CASE WHEN v.name IS NOT NULL OR m.stat IS NULL THEN NULL
            ELSE coalesce(o.n_out_of_region, 0) END AS n_out_of_region,
       m.ord
FROM counts AS c
LEFT JOIN mask_variants AS v ON c.keep_column = 'keep_' || v.name
LEFT JOIN masks AS m ON m.name = coalesce(v.mask, substr(c.keep_column, 6))
LEFT JOIN outside AS o
  ON o.seed IS NOT DISTINCT FROM c.seed AND o.name = m.name;

CREATE OR REPLACE VIEW mask_summary AS
SELECT mask, family, direction, estimator,
       CAST(sum(n_tokens) AS BIGINT) AS n_tokens,
       CAST(sum(n_kept) AS BIGINT) AS n_kept,
       CAST(sum(n_masked) AS BIGINT) AS n_masked,
       sum(n_kept) / sum(n_tokens) AS keep_fraction,
       CAST(sum(n_out_of_region) AS BIGINT) AS n_out_of_region,
       min(ord) AS ord
FROM mask_summary_by_seed
GROUP BY mask, family, direction, estimator;

CREATE OR REPLACE VIEW log_health AS
-- `masks` output has no seed column: its whole log is one seed, as the headline counts it
SELECT count(*) AS n_tokens,
       count(DISTINCT coalesce(seed, -1)) AS n_seeds,
       count(*) FILTER (WHERE mass_overflow) AS n_mass_overflow,
       count(*) FILTER (WHERE NOT (isfinite(kl_topk) AND isfinite(tv_topk)
                                   AND isfinite(ratio))) AS n_nonfinite,
       count(*) FILTER (WHERE advantage = 0) AS n_zero_advantage,
       count(dkl_exact) AS n_exact,
       (SELECT count(*) FROM updates) AS n_update_rows
FROM tokens;
