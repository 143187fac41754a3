-- updates: every updates/v1 row of a replay (one per seed, update mask and token), in place.
CREATE OR REPLACE VIEW updates AS
SELECT * FROM updates_template
UNION ALL BY NAME
SELECT * FROM read_parquet(getvariable('report_run').updates_files,
                           hive_partitioning = true,
                           union_by_name = true);
