-- SKUs whose order streams the writer reads: not ended more than a day ago
SELECT id FROM skus
WHERE sale_ends_at IS NULL OR sale_ends_at > now() - interval '1 day'
ORDER BY id
