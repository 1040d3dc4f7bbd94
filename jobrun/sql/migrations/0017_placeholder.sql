-- 0017 placeholder for {schema} (local only)
SELECT 1;
