-- settles the recorded pending order $1 of entry $2, once: 'written' (its
-- row is the outcome) or 'id_conflict' (the row of its id is another
-- reservation's; nothing was taken for this one)
UPDATE order_pending SET settled_at = now(), outcome = $3
WHERE order_id = $1 AND entry_id = $2 AND settled_at IS NULL
