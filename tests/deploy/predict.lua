-- wrk script for tests/deploy/test_nginx_lb.py: every request is a one-row POST /predict.
wrk.method = "POST"
wrk.body = '{"instances": [{"x1": 0.1, "x2": -0.3}]}'
wrk.headers["Content-Type"] = "application/json"
