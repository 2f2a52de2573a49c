-- wrk script for `make bench`: the same POST the load generator sends, to the
-- HTTP ceiling server (which answers every request alike).
wrk.method = "POST"
wrk.body = '{"qty":1}' -- the buyer is the bearer token bench.sh passes with -H
wrk.headers["Content-Type"] = "application/json"
