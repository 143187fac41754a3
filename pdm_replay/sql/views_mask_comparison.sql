-- Mask comparison (issue 19 item 3): every mask of the run side by side. Which mask would
-- have kept the divergence down, at what cost in kept gradient?
--
-- The region is the paper's, per divergence family f: D_pre = f_topk > delta_f at the run's
-- thresholds (report_run, those the keep_<mask> columns were written at; NaN is never out
-- of region). Every mask is measured on both families, so all masks are compared on the
-- same tokens. Masks are the run's keep_<mask> columns (sweep variants <mask>@<value>
-- included; masks the run lacks are NULL in `tokens` and dropped by UNPIVOT), plus the
-- trainer's real step `actual` (its `kept` column of updates/v1) where the replay has one.
-- Each mask's realized Delta D is read under its own update (update_mask = the mask's name,
-- where the replay simulated that mask; `actual` under itself); a masks-only run has no
-- updates, so the Delta D columns are NULL.
--
-- The report section's spec (pdm_replay/report/section_catalog.py) registers the views on
-- every report connection and runs the named query at the end of this file.

-- One row per (family, out-of-region token) with every keep_<mask> column.
CREATE OR REPLACE VIEW comparison_region AS
SELECT 'kl' AS family, getvariable('report_run').delta_kl AS delta, seed, sample_id, pos,
       COLUMNS('^keep_')
FROM tokens
WHERE NOT isnan(kl_topk) AND kl_topk > getvariable('report_run').delta_kl
UNION ALL
SELECT 'tv' AS family, getvariable('report_run').delta_tv AS delta, seed, sample_id, pos,
       COLUMNS('^keep_')
FROM tokens
WHERE NOT isnan(tv_topk) AND tv_topk > getvariable('report_run').delta_tv;

-- Each mask's decision on each out-of-region token; `actual`: the trainer mask's.
CREATE OR REPLACE VIEW comparison_decisions AS
SELECT substr(keep_column, 6) AS name, family, delta, seed, sample_id, pos, kept
FROM (UNPIVOT comparison_region ON COLUMNS('^keep_') INTO NAME keep_column VALUE kept)
UNION ALL
SELECT getvariable('report_run').actual, r.family, r.delta, r.seed, r.sample_id, r.pos, u.kept
FROM comparison_region AS r
JOIN updates AS u
  ON u.seed = r.seed AND u.sample_id = r.sample_id AND u.pos = r.pos
 AND u.update_mask = getvariable('report_run').actual;

-- Keep counts over every token of the run, per mask (and `actual`).
CREATE OR REPLACE VIEW comparison_totals AS
SELECT substr(keep_column, 6) AS name, n_tokens, CAST(n_kept AS BIGINT) AS n_kept
FROM (UNPIVOT (SELECT count(*) AS n_tokens, sum(CAST(COLUMNS('^keep_') AS BIGINT))
               FROM tokens)
      ON COLUMNS('^keep_') INTO NAME keep_column VALUE n_kept)
UNION ALL
SELECT getvariable('report_run').actual, count(*), count(*) FILTER (WHERE kept)
FROM updates WHERE update_mask = getvariable('report_run').actual
HAVING count(*) > 0;

-- Realized Delta D of each out-of-region token under the deciding mask's own update.
CREATE OR REPLACE VIEW comparison_deltas AS
SELECT d.*, CASE d.family WHEN 'kl' THEN u.delta_kl_topk ELSE u.delta_tv_topk END AS delta_d
FROM comparison_decisions AS d
LEFT JOIN updates AS u
  ON u.seed = d.seed AND u.sample_id = d.sample_id AND u.pos = d.pos
 AND u.update_mask = d.name;

-- One row per (mask, family): keep fraction over all tokens, the out-of-region count and
-- how many of those the mask kept, and the distribution of Delta D on the out-of-region
-- tokens under the mask's own update (n_measured of them have an update row).
CREATE OR REPLACE VIEW mask_comparison AS
WITH agg AS (
    SELECT name, family,
           count(*) AS n_out_of_region,
           count(*) FILTER (WHERE kept) AS n_out_of_region_kept,
           count(delta_d) AS n_measured,
           avg(delta_d) AS mean_delta_d,
           quantile_cont(delta_d, [0.1, 0.25, 0.5, 0.75, 0.9]) AS q,
           avg(CAST(delta_d > 0 AS DOUBLE)) AS share_increased
    FROM comparison_deltas
    GROUP BY name, family
),
families AS (
    SELECT * FROM (VALUES ('kl', getvariable('report_run').delta_kl),
                          ('tv', getvariable('report_run').delta_tv)) AS f(family, delta)
),
own AS (SELECT DISTINCT update_mask FROM updates)
SELECT t.name AS mask,
       CASE WHEN t.name = getvariable('report_run').actual AND m.name IS NULL
            THEN 'trainer' ELSE m.direction END AS direction,
       m.family AS mask_family,
       f.family, f.delta,
       t.n_tokens, t.n_kept,
       t.n_kept / nullif(t.n_tokens, 0) AS keep_fraction,
       coalesce(a.n_out_of_region, 0) AS n_out_of_region,
       coalesce(a.n_out_of_region_kept, 0) AS n_out_of_region_kept,
       a.n_out_of_region_kept / nullif(a.n_out_of_region, 0) AS out_of_region_keep_fraction,
       o.update_mask AS update_mask,
       coalesce(a.n_measured, 0) AS n_measured,
       a.mean_delta_d,
       a.q[1] AS p10_delta_d, a.q[2] AS p25_delta_d, a.q[3] AS median_delta_d,
       a.q[4] AS p75_delta_d, a.q[5] AS p90_delta_d,
       a.share_increased,
       coalesce(m.ord, (SELECT max(ord) + 1 FROM masks)) AS ord
FROM comparison_totals AS t
CROSS JOIN families AS f
LEFT JOIN agg AS a ON a.name = t.name AND a.family = f.family
LEFT JOIN own AS o ON o.update_mask = t.name
LEFT JOIN mask_variants AS v ON v.name = t.name
LEFT JOIN masks AS m ON m.name = coalesce(v.mask, t.name);

-- name: mask_comparison
-- Every mask of the run (registry order, `actual` last) x divergence family ($family NULL:
-- both).
SELECT * EXCLUDE (ord) FROM mask_comparison
WHERE $family IS NULL OR family = $family
ORDER BY family, ord, mask;
