-- Materialize the disagreement set once per connection (it is small, but computing it
-- joins every updates row): the views that read `disagreements` then read the copy.
CREATE OR REPLACE TEMP TABLE disagreements_cached AS
SELECT * FROM disagreements_live;

CREATE OR REPLACE VIEW disagreements AS
SELECT * FROM disagreements_cached;
