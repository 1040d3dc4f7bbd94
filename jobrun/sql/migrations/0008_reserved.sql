-- 0008 reserved: another change's number (versions run without gaps). This placeholder
-- changes nothing in {schema} and gives way to that migration when both are merged.
SELECT 1;
