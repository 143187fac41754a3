-- The tokens/v1 columns the direction analysis reads per comparison (set after the
-- `comparisons` table is known): regular expressions of the region statistics and the
-- predictive slopes, built from the registry's criteria (pdm_replay.report.comparisons).
SET VARIABLE report_regions = {
    'stat_columns': $stat_columns,
    'slope_columns': $slope_columns
};
