-- the stock of parent SKU $1: the sum of its buckets'
SELECT coalesce(sum(stock), 0) FROM skus WHERE parent_id = $1
