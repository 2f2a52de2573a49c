-- wrk script for `make bench`: the same POST the load generator sends, to the
-- HTTP ceiling server (which answers every request alike).
wrk.method = "POST"
wrk.body = '{"user_id":1,"qty":1}'
wrk.headers["Content-Type"] = "application/json"
