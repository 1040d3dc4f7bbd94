-- 0008 is another change's number (the versions must run without gaps); this placeholder
-- changes nothing and gives way to it.
SELECT 1;
