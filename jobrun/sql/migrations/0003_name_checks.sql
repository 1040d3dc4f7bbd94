-- 0003 name checks: the jobs table's task and queue name checks in a form that is cheap per row.

-- 0001 bounds the length inside the regular expressions ({{0,199}}, {{0,62}}). PostgreSQL's
-- regex engine runs such a bound slowly: ~11 µs per row for the task check and ~2 µs for the
-- queue check, about two thirds of the cost of inserting a job in bulk. The same rules as an
-- unbounded class plus length() cost well under 1 µs. Only ASCII characters match the
-- classes, so length() counts what the bounds counted: same rules, same names, same errors.
-- Adding the checks scans the table once (under the ALTER TABLE lock) to validate them.
ALTER TABLE {schema}.jobs
    DROP CONSTRAINT queue_name_valid,
    ADD CONSTRAINT queue_name_valid
        CHECK (queue ~ '^[A-Za-z0-9][A-Za-z0-9_.-]*$' AND length(queue) <= 63),
    DROP CONSTRAINT task_name_valid,
    ADD CONSTRAINT task_name_valid
        CHECK (task ~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' AND length(task) <= 200);
