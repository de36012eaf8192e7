-- GET the open pixel HERALD_BENCH_PIXEL (a path) over and over: each connection waits
-- HERALD_BENCH_PIXEL_DELAY_MS (default 10) between its requests, and each thread stops after
-- HERALD_BENCH_PIXEL_PER_THREAD responses (default 10000), so `wrk -t2 -c24 -d10s` makes about
-- 20,000 hits in 10 s (pixel.sh).
local path = os.getenv("HERALD_BENCH_PIXEL")
local pause = tonumber(os.getenv("HERALD_BENCH_PIXEL_DELAY_MS") or "10")
local limit = tonumber(os.getenv("HERALD_BENCH_PIXEL_PER_THREAD") or "10000")
local done = 0
request = function()
  return wrk.format("GET", path)
end
delay = function()
  return pause
end
response = function(status, headers, body)
  done = done + 1
  if done >= limit then
    wrk.thread:stop()
  end
end
