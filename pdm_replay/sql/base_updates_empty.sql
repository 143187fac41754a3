-- updates of a run without a replay (`pdm-replay masks` output): no rows, every column.
CREATE OR REPLACE VIEW updates AS
SELECT * FROM updates_template;
