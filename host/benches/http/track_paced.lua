-- track.lua at a steady rate instead of as fast as it goes: each connection waits
-- HERALD_BENCH_TRACK_DELAY_MS (default 20) between its requests, so `wrk -c4` is about 200
-- requests a second, a busy site's page views (pixel.sh).
dofile("host/benches/http/track.lua")
local pause = tonumber(os.getenv("HERALD_BENCH_TRACK_DELAY_MS") or "20")
delay = function()
  return pause
end
