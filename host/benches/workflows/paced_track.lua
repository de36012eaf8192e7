-- POST /v1/track at a fixed rate, for the workflow benchmark's latency phase (run.py).
-- One wrk thread (it paces every connection on one schedule): request k leaves at
-- start + k / PACED_RATE seconds, or at once when it is behind; a request that leaves more than
-- 50 ms after its slot is counted late. Each request tracks PACED_EVENT for a new contact
-- PACED_PREFIX<k>@example.com.
--   HERALD_BENCH_KEY=… PACED_RATE=1000 PACED_PREFIX=p PACED_EVENT=bench \
--     wrk -t1 -c32 -d10s -s paced_track.lua http://127.0.0.1:PORT
-- wrk's Lua (LuaJIT) has no clock finer than a second, so the monotonic clock is read through
-- the FFI.
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } herald_timespec;
int clock_gettime(int clock, herald_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local ts = ffi.new("herald_timespec")
local function now_ms()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

local interval = 1000 / tonumber(os.getenv("PACED_RATE"))
local prefix = os.getenv("PACED_PREFIX")
local event = os.getenv("PACED_EVENT")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("HERALD_BENCH_KEY")

local threads = {}
setup = function(thread)
  table.insert(threads, thread)
end

local start = nil
local slot = 0
local sent = 0
late = 0

-- Called before each request of a connection: how long it waits for its slot.
delay = function()
  local now = now_ms()
  start = start or now
  local wait = start + slot * interval - now
  slot = slot + 1
  if wait < -50 then
    late = late + 1
  end
  return math.max(0, math.floor(wait))
end

request = function()
  sent = sent + 1
  local body = string.format('{"email":"%s%d@example.com","event":"%s"}', prefix, sent, event)
  return wrk.format(nil, "/v1/track", nil, body)
end

done = function(summary)
  local count = 0
  for _, thread in ipairs(threads) do
    count = count + thread:get("late")
  end
  local errors = summary.errors
  io.write(string.format("paced: %d responses, %d late, %d non-2xx, %d socket errors\n",
    summary.requests, count, errors.status, errors.connect + errors.read + errors.write + errors.timeout))
end
