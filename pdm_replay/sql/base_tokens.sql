-- tokens: every tokens/v1 row of the run, read in place (out of core).
-- tokens_template is an empty table with every column of the contract (all registered masks,
-- seed, exact columns): UNION ALL BY NAME fills columns a run lacks with NULL, so the views
-- below never depend on which masks or exact columns a run has. Projections and filters are
-- still pushed into the Parquet scan. report_run.step (NULL: all) keeps one logged step
-- (`report --by step`); every view reads tokens, so every section follows it.
CREATE OR REPLACE VIEW tokens AS
SELECT * FROM (
    SELECT * FROM tokens_template
    UNION ALL BY NAME
    SELECT * FROM read_parquet(getvariable('report_run').tokens_files,
                               hive_partitioning = getvariable('report_run').hive_partitioning,
                               union_by_name = true)
)
WHERE getvariable('report_run').step IS NULL OR step = getvariable('report_run').step;
