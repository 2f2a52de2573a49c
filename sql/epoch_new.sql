-- a fresh, never reused epoch for loading SKU $1 into Redis
INSERT INTO sku_epochs (epoch, sku_id) VALUES (nextval('redis_epoch_seq'), $1) RETURNING epoch
