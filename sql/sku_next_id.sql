SELECT nextval(pg_get_serial_sequence('skus', 'id'))
