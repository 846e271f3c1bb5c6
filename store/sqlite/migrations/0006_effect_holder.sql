-- The process holding an effect's claim: its engine instance id (empty for a
-- single process) and the random id of that process's start. A claim whose
-- holder is gone is taken over at once instead of after the claim's age.
ALTER TABLE effects ADD COLUMN holder_instance TEXT NOT NULL DEFAULT '';
ALTER TABLE effects ADD COLUMN holder_boot TEXT NOT NULL DEFAULT '';
