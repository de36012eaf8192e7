-- GET /contacts (first page of 20, with its total).
wrk.method = "GET"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("HERALD_BENCH_KEY")
