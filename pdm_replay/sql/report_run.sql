-- Run-wide settings every report view reads: the Parquet files, the thresholds and the
-- basis names (pdm_replay.names.sql_names(): `actual`, `none`, `own`, never spelled in the
-- SQL). One struct variable so that views stay free of literals; values arrive as
-- $parameters.
-- getvariable() is constant-folded, so thresholds are pushed into the Parquet scans.
SET VARIABLE report_run = {
    'kind': $kind,
    'tokens_files': $tokens_files,
    'updates_files': $updates_files,
    'hive_partitioning': $hive_partitioning,
    'eps': $eps,
    'eps_low': $eps_low,
    'eps_high': $eps_high,
    'delta_kl': $delta_kl,
    'delta_tv': $delta_tv,
    'thresholds_source': $thresholds_source,
    'step': $step,
    'actual': $actual,
    'none': $none,
    'own': $own
};
